"""Two KIP-848 consumers (``group.protocol=consumer``, Apache Kafka's Java client) owning the
same partitions at once, after one failed heartbeat of the member that reconciles.

    python benchmarks/kip848_owned_repro.py --broker reference|kafka [--version 4.4.0] [--client-version V] [--work DIR]

The Java client reports the partitions it owns in ConsumerGroupHeartbeat (``TopicPartitions``)
from its *reconciled* assignment (``AbstractMembershipManager.currentAssignment``), which is
updated only once an assignment's ``onPartitionsAssigned`` callback has run, in a later
``poll()``; and it sends that field only when it changed, or in the first heartbeat after a
failed one (``resetHeartbeatState``). So a member whose callback is still pending, and whose
heartbeat failed once, tells the coordinator it owns what it owned before (here nothing). The
coordinator (Kafka's ``CurrentAssignmentBuilder``, the reference's ``consumer_group.reconcile``)
takes partitions pending revocation that are not in that list as revoked: it moves the member
to the new epoch and frees them for another member, while the callback the member then runs
still gives it its older, larger assignment.

Steps (one broker, reached through kafkacheck's fault proxy; topic ``t`` with 4 partitions; the
range assignor; no auto-commit):

1. A subscribes and polls once with a zero timeout: it joins and the coordinator assigns it all
   four partitions, but its onPartitionsAssigned callback waits for its next poll.
2. B subscribes and polls once the same way: the target gives B two of A's partitions, which A
   must revoke first (its next heartbeat, without TopicPartitions, keeps it revoking).
3. A's next ConsumerGroupHeartbeat is cut (the proxy resets A's connection and drops the request).
   A's retry carries TopicPartitions again: its reconciled assignment, empty.
4. B polls until its callback gives it partitions.
5. A polls once (zero timeout): its pending callback runs.

``--no-cut`` is the control: step 3 does nothing, A's heartbeats keep saying nothing of what it
owns, the coordinator keeps A revoking and B gets nothing (``NOT AFFECTED``).

Every ConsumerGroupHeartbeat of A and B is printed as the proxy saw it (request epoch and owned
partitions, answer epoch and assignment). Ends with ``AFFECTED`` (A and B both own a partition:
their ``assignment()`` overlaps) or ``NOT AFFECTED``: exit 0 either way, 2 when a step failed,
3 for bad input, 130 when interrupted. Every process started is stopped at the end; the work
directory (broker and client logs) stays.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from fault_injection.real.proxy import HeldRequest, HoldClaim
from kafkacheck.real import kafka_dist as kd

TOPIC = "t"
GROUP = "kip848-owned-repro"
PARTITIONS = 4
HEARTBEAT = 68  # ConsumerGroupHeartbeat's API key
SETTLE_S = 2.0  # heartbeat intervals (500 ms on both brokers) for the coordinator to see a step
WAIT_S = 15.0  # the longest a step waits for what it needs


class BadInput(Exception):
    pass


class StepFailed(Exception):
    pass


class Heartbeats:
    """The proxy's observer: every ConsumerGroupHeartbeat of the named clients, decoded."""

    def __init__(self, names: dict[str, str]) -> None:
        from reference.server import kip848_messages  # noqa: F401 - registers the KIP-848 classes
        from reference.server.protocol import REQUESTS, RESPONSES

        self.requests, self.responses = REQUESTS[HEARTBEAT], RESPONSES[HEARTBEAT]
        self.names = names  # client id -> A / B
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.lines: list[str] = []

    def __call__(self, event: str, info: dict, frame: bytes | None) -> None:
        who = self.names.get(info.get("client_id", ""))
        if info.get("api_key") != HEARTBEAT or who is None or frame is None:
            return
        v = info["api_version"]
        try:
            if event == "request":
                r = self.requests.decode(frame[4:], version=v, header=True)
                line = f"{who} -> epoch={r.member_epoch} owned={_parts(r.topic_partitions)}"
            else:
                r = self.responses.decode(frame[4:], version=v, header=True)
                from kafka.errors import for_code

                error = for_code(r.error_code).__name__ if r.error_code else ""
                line = (f"{who} <- {error}" if error else
                        f"{who} <- epoch={r.member_epoch} assignment="
                        f"{_parts(r.assignment.topic_partitions) if r.assignment is not None else 'unchanged'}")
        except Exception as e:  # a frame that does not decode is shown, not fatal
            line = f"{who} {event} (undecoded: {type(e).__name__})"
        self.note(line)

    def note(self, line: str) -> None:
        with self.lock:
            self.lines.append(f"  {time.monotonic() - self.t0:6.2f}s  {line}")
            print(self.lines[-1], flush=True)


def _parts(topic_partitions) -> str:
    if topic_partitions is None:
        return "null"
    return str(sorted(p for t in topic_partitions for p in t.partitions))


class CutNextHeartbeat(HoldClaim):
    """Holds A's next ConsumerGroupHeartbeat: the proxy resets A's connection; it is never delivered."""

    mode = "reset"

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.taken = False
        self.held = threading.Event()
        self.request: HeldRequest | None = None

    def claim(self, proxy: str, info: dict) -> bool:
        if self.taken or info.get("api_key") != HEARTBEAT or info.get("client_id") != self.client_id:
            return False
        self.taken = True
        return True

    def on_held(self, held: HeldRequest) -> None:
        self.request = held
        self.held.set()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage text
        raise BadInput(message)


def parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="kip848_owned_repro.py", description=__doc__.split("\n")[0])
    p.add_argument("--broker", choices=["reference", "kafka"], required=True)
    p.add_argument("--version", help="Apache Kafka's release (--broker kafka; default: kafkacheck's)")
    p.add_argument("--client-version", help="the Java client's release (default: the broker's, or kafkacheck's)")
    p.add_argument("--work", type=Path, help="where the broker and client logs go (default: a new temporary directory)")
    p.add_argument("--no-cut", action="store_true", help="the control: step 3 leaves A's heartbeat alone")

    a = p.parse_args(argv)
    if a.version is not None and a.broker != "kafka":
        raise BadInput("--version is the Apache Kafka broker's: give it with --broker kafka")
    return a


def reproduce(a: argparse.Namespace) -> str:
    from kafkacheck.conform.targets import spawn
    from kafkacheck.real.java import Handle, JavaError, consumer_conf, stop_driver, use_driver
    from kafkacheck.real.java_clients import JavaClient

    work = a.work or Path(tempfile.mkdtemp(prefix="kip848-owned-"))
    work.mkdir(parents=True, exist_ok=True)
    broker_version = a.version or kd.DEFAULT_VERSION
    client = kd.KafkaDist(a.client_version or broker_version)
    print(f"work directory: {work}")
    print(f"broker: {'the reference' if a.broker == 'reference' else f'Apache Kafka {broker_version}'}, 1 node; "
          f"client: Apache Kafka's Java client {client.version}")
    target = spawn(a.broker, work / "broker", brokers=1, proxied=True,
                   kafka_version=broker_version if a.broker == "kafka" else None, log=print)
    handles: list = []
    try:
        use_driver(client, work / "java-client.log")
        (proxy,) = target.proxies.values()
        hb = Heartbeats({"repro-A": "A", "repro-B": "B"})
        proxy.observer = hb
        jc = JavaClient(target.bootstrap)
        error = jc.create_topic(TOPIC, PARTITIONS, 1)
        if error:
            raise StepFailed(f"create topic {TOPIC}: {error}")
        for p in range(PARTITIONS):
            sent = jc.produce(TOPIC, p, [f"r{p}".encode()])
            if sent[0].error:
                raise StepFailed(f"produce to {TOPIC}-{p}: {sent[0].error}")

        def member(name: str) -> Handle:
            h = Handle("consumer", consumer_conf(target.bootstrap, 20.0, **{
                "group.id": GROUP, "client.id": f"repro-{name}", "group.protocol": "consumer",
                "group.remote.assignor": "range", "auto.offset.reset": "earliest"}), 20.0)
            handles.append(h)
            # the topic's id known to the client before it joins (else it acknowledges a partial assignment)
            h.call("offsets", tps=[[TOPIC, p] for p in range(PARTITIONS)])
            h.call("subscribe", topics=[TOPIC])
            return h

        def poll(h: Handle, ms: int) -> list:
            answer = h.call("poll", poll_ms=ms, with_generation=True)
            return [(e["type"], e["generation"], sorted(int(k.rsplit(":", 1)[1]) for k in e["keys"]))
                    for e in answer["log"]]

        def owned(h: Handle) -> set[int]:
            return {p for _t, p in h.call("assignment")}

        print("\n1. A subscribes and polls once (0 ms)")
        a_member = member("A")
        a_log = poll(a_member, 0)
        time.sleep(SETTLE_S)
        print(f"   A's callbacks so far: {a_log}")
        if a_log:
            raise StepFailed("A's callback ran in its first poll: the scenario needs it pending")

        print("\n2. B subscribes and polls once (0 ms)")
        b_member = member("B")
        b_log = poll(b_member, 0)
        time.sleep(SETTLE_S)

        if a.no_cut:
            print("\n3. (the control: A's heartbeats go through)")
        else:
            print("\n3. A's next ConsumerGroupHeartbeat is cut (connection reset, request dropped)")
            cut = CutNextHeartbeat("repro-A")
            proxy.arm(cut)
            if not cut.held.wait(WAIT_S):
                raise StepFailed("A sent no heartbeat to cut")
            proxy.disarm()
            assert cut.request is not None
            cut.request.drop()
            hb.note("A -> (cut by the proxy)")
            time.sleep(SETTLE_S)

        print("\n4. B polls until its callback gives it partitions")
        deadline = time.monotonic() + WAIT_S
        while not owned(b_member) and time.monotonic() < deadline:
            b_log += poll(b_member, 500)
        print(f"   B's callbacks: {b_log}; B's assignment(): {sorted(owned(b_member))}")

        print("\n5. A polls once (0 ms): its pending callback runs")
        a_log += poll(a_member, 0)
        a_owned, b_owned = owned(a_member), owned(b_member)
        print(f"   A's callbacks: {a_log}; A's assignment(): {sorted(a_owned)}")
        print(f"   B's assignment(): {sorted(b_owned)}")
        time.sleep(SETTLE_S)  # the heartbeats that follow, for the record
        both = sorted(a_owned & b_owned)
        if both:
            return (f"AFFECTED: partitions {both} of {TOPIC} are in both A's and B's assignment() "
                    f"(A {sorted(a_owned)}, B {sorted(b_owned)})")
        return f"NOT AFFECTED: A owns {sorted(a_owned)}, B owns {sorted(b_owned)}"
    except JavaError as e:
        raise StepFailed(f"the Java client: {e}") from e
    finally:
        for h in handles:
            h.close()
        stop_driver()
        target.close()


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except BadInput as e:
        print(f"kip848_owned_repro.py: {e}", file=sys.stderr)
        return 3
    try:
        print(f"\nRESULT: {reproduce(args)}")
        return 0
    except kd.KafkaVersionUnknown as e:
        print(f"kip848_owned_repro.py: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a step that failed: say which, exit 2
        print(f"\nFAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

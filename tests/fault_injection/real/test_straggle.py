"""The request-aware fault proxy and the straggler: Kafka frames read and named, one request held
back while its client retries elsewhere, delivered late on its old connection with the broker's
answer kept, and the moment "the next transaction began" seen from the traffic.

The upstream is a small Kafka-speaking server: it decodes each request with the wire codec of
``kafkacheck serve`` and answers with a real response of the same API and version, so the bytes
the proxy reads are exactly those a broker and a client exchange."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time

import pytest
from kafka.protocol.producer import AddPartitionsToTxnRequest, EndTxnRequest, ProduceRequest

from fault_injection.real.proxy import FaultProxy, HoldClaim
from fault_injection.real.straggle import Straggler
from reference import records as rec
from reference.server.protocol import build, encode_response, peek_request, response_errors


class _Broker(socketserver.BaseRequestHandler):
    """Answers every request with NONE, except EndTxn while ``refuse`` is set (INVALID_TXN_STATE);
    records what it received, per connection."""

    received: list[tuple[int, dict]] = []
    refuse = False
    lock = threading.Lock()

    def handle(self):
        conn = id(self)
        try:
            while True:
                head = self.request.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                frame = self.request.recv(size, socket.MSG_WAITALL)
                info = peek_request(frame)
                with _Broker.lock:
                    _Broker.received.append((conn, info))
                self.request.sendall(_answer(info))
        except OSError:
            pass


def _answer(info: dict) -> bytes:
    key, version, corr = info["api_key"], info["api_version"], info["correlation_id"]
    if key == 26:
        error = 48 if _Broker.refuse else 0
        return encode_response(26, version, corr, {"throttle_time_ms": 0, "error_code": error})
    if key == 0:
        return encode_response(0, version, corr, {"throttle_time_ms": 0, "responses": [
            {"name": p.rsplit(":", 1)[0], "partition_responses": [
                {"index": int(p.rsplit(":", 1)[1]), "error_code": 0, "base_offset": 7, "log_append_time_ms": -1,
                 "log_start_offset": 0, "record_errors": [], "error_message": None}]}
            for p in info.get("partitions", [])]})
    return encode_response(24, version, corr, {"throttle_time_ms": 0, "results_by_topic_v3_and_below": []})


@pytest.fixture
def cluster():
    _Broker.received = []
    _Broker.refuse = False
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Broker)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = FaultProxy(server.server_address, name="kafka-1", frames=True)
    proxy.start()
    yield proxy
    proxy.stop()
    server.shutdown()
    server.server_close()


def _end_txn(corr: int, txn: str = "t1", epoch: int = 3, commit: bool = True, version: int = 3) -> bytes:
    r = EndTxnRequest[version](transactional_id=txn, producer_id=11, producer_epoch=epoch, committed=commit)
    r.with_header(correlation_id=corr, client_id="test-producer")
    return bytes(r.encode(header=True, framed=True))


def _produce(corr: int, txn: str | None = "t1", pid: int = 11, seq: int = 5) -> bytes:
    batch = rec.encode_batch([rec.RecordInput(None, b"v", (), 0)], producer_id=pid, producer_epoch=3,
                             base_sequence=seq, transactional=txn is not None)
    r = build(ProduceRequest[9], {"transactional_id": txn, "acks": -1, "timeout_ms": 1000,
                                  "topic_data": [{"name": "q", "partition_data": [{"index": 2, "records": batch}]}]})
    r.with_header(correlation_id=corr, client_id="test-producer")
    return bytes(r.encode(header=True, framed=True))


def _round_trip(s: socket.socket, frame: bytes) -> int:
    """Send a request frame, read one response frame: its correlation id."""
    s.sendall(frame)
    (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
    body = s.recv(size, socket.MSG_WAITALL)
    return struct.unpack_from(">i", body)[0]


def _connect(p: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", p.port), timeout=3)


def test_peek_names_the_request_and_its_producer():
    end = peek_request(_end_txn(41, commit=False, version=5)[4:])
    assert end | {"client_id": "x"} == {"api_key": 26, "api_version": 5, "correlation_id": 41, "api": "EndTxn",
                                         "client_id": "x", "transactional_id": "t1", "producer_id": 11,
                                         "producer_epoch": 3, "committed": False}
    produce = peek_request(_produce(42, seq=9)[4:])
    assert (produce["api"], produce["transactional_id"], produce["producer_id"], produce["producer_epoch"],
            produce["base_sequence"], produce["partitions"]) == ("Produce", "t1", 11, 3, 9, ["q:2"])
    add = build(AddPartitionsToTxnRequest[3], {"v3_and_below_transactional_id": "t2", "v3_and_below_producer_id": 4,
                                               "v3_and_below_producer_epoch": 0,
                                               "v3_and_below_topics": [{"name": "q", "partitions": [0, 3]}]})
    add.with_header(correlation_id=43, client_id="c")
    info = peek_request(bytes(add.encode(header=True)))
    assert (info["api"], info["transactional_id"], info["partitions"]) == ("AddPartitionsToTxn", "t2", ["q:0", "q:3"])
    # a body that does not decode still has its header named
    assert peek_request(struct.pack(">hhi", 26, 3, 44) + b"\x00\x01x\xff") == {
        "api_key": 26, "api_version": 3, "correlation_id": 44, "api": "EndTxn", "client_id": "x"}
    answer = encode_response(26, 3, 41, {"throttle_time_ms": 0, "error_code": 48})
    assert response_errors(26, 3, answer[4:]) == ["INVALID_TXN_STATE"]
    assert response_errors(26, 3, b"\x00\x00") is None


def test_frames_pass_through_and_the_observer_sees_requests_and_answers(cluster):
    seen: list[tuple[str, str, int]] = []
    cluster.observer = lambda event, info, frame: seen.append((event, info["api"], info["correlation_id"]))
    s = _connect(cluster)
    assert _round_trip(s, _end_txn(1)) == 1
    assert _round_trip(s, _produce(2)) == 2
    s.close()
    # the proxy's thread tells the observer of a response once it delivered it, so the client
    # may have it a moment before the observer does (a CI run under load caught that)
    deadline = time.monotonic() + 10
    while len(seen) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [("request", "EndTxn", 1), ("response", "EndTxn", 1), ("request", "Produce", 2),
                    ("response", "Produce", 2)]


class _Once(HoldClaim):
    def __init__(self, api: str, mode: str) -> None:
        self.api, self.mode, self.held = api, mode, []

    def claim(self, proxy: str, info: dict) -> bool:
        return info["api"] == self.api and not self.held

    def on_held(self, held) -> None:
        self.held.append(held)


def test_a_held_request_is_delivered_late_on_its_old_connection_with_the_answer_kept(cluster):
    claim = _Once("EndTxn", "reset")
    cluster.arm(claim)
    first = _connect(cluster)
    assert _round_trip(first, _produce(1)) == 1  # not held: not the API asked for
    with pytest.raises(OSError):  # the EndTxn is held: its connection is reset
        _round_trip(first, _end_txn(2))
    [held] = claim.held
    assert (held.info["api"], held.info["correlation_id"], held.info["proxy"]) == ("EndTxn", 2, "kafka-1")
    # the client retries on a new connection, which goes through
    cluster.disarm()
    second = _connect(cluster)
    assert _round_trip(second, _end_txn(3)) == 3
    assert [i["correlation_id"] for _c, i in _Broker.received] == [1, 3]
    _Broker.refuse = True  # the late one finds the transaction ended: the broker refuses it
    held.release()
    assert held.done.wait(5)
    assert held.outcome == "answered" and held.answer == ["INVALID_TXN_STATE"]
    late_conn, late = _Broker.received[-1]
    assert late["correlation_id"] == 2
    assert late_conn == _Broker.received[0][0]  # on the connection it came in on
    second.close()


def test_abandon_leaves_the_client_waiting_and_nothing_more_passes(cluster):
    claim = _Once("Produce", "abandon")
    cluster.arm(claim)
    s = _connect(cluster)
    s.settimeout(0.5)
    s.sendall(_produce(7))
    with pytest.raises(TimeoutError):  # no answer, and no reset: the client times out by itself
        s.recv(4)
    s.sendall(_end_txn(8))  # behind the held request: never forwarded
    time.sleep(0.3)
    assert _Broker.received == []
    [held] = claim.held
    held.release()
    assert held.done.wait(5) and held.answer == ["NONE"]
    assert [i["correlation_id"] for _c, i in _Broker.received] == [7]
    s.close()


def test_a_held_request_whose_connection_died_is_reported_not_delivered(cluster):
    claim = _Once("EndTxn", "reset")
    cluster.arm(claim)
    with pytest.raises(OSError):
        _round_trip(_connect(cluster), _end_txn(5))
    [held] = claim.held
    held.drop()
    assert held.done.wait(5) and held.outcome == "dropped"
    held.release()  # too late: nothing is sent
    time.sleep(0.2)
    assert _Broker.received == []


def test_the_straggler_releases_once_the_next_transaction_holds_data(cluster):
    straggler = Straggler({"kafka-1": cluster})
    client = _connect(cluster)
    result: list = []
    t = threading.Thread(target=lambda: result.append(straggler.hold("EndTxn", "reset", 5.0)))
    t.start()
    time.sleep(0.2)
    with pytest.raises(OSError):
        _round_trip(client, _end_txn(1))
    t.join(5)
    [held] = result
    assert held is not None and held.info["transactional_id"] == "t1"
    stop = threading.Event()
    why: list[str] = []
    waiter = threading.Thread(target=lambda: why.append(straggler.wait_for_release(held, "next-transaction", 10.0,
                                                                                   stop)))
    waiter.start()
    retry = _connect(cluster)
    assert _round_trip(retry, _produce(2, txn="other")) == 2  # another producer's write: not the moment
    assert _round_trip(retry, _produce(3)) == 3  # t1's write, but its transaction has not ended yet
    time.sleep(0.2)
    assert not why
    assert _round_trip(retry, _end_txn(4)) == 4  # the retried EndTxn ends the transaction
    assert _round_trip(retry, _produce(5, seq=6)) == 5  # the next transaction's first write, answered
    waiter.join(5)
    assert why == ["next transaction began (Produce)"]
    held.release()
    assert held.done.wait(5) and held.answer == ["NONE"]
    # a Produce without a producer id is never held (nothing could land late); nothing held: None
    assert straggler.hold("Produce", "reset", 0.3) is None
    with pytest.raises(ValueError):
        straggler.hold("Fetch", "reset", 0.1)
    straggler.close()
    retry.close()

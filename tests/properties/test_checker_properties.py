"""The checker, tested as Hypothesis tests it: histories drawn from a sequential model of a
partitioned log are judged valid, and each mutation of the model (a lost acknowledged write,
a duplicated record, a reader skipping or going back, a read of an aborted send or of an
aborted transaction, an offset given out twice, a second owner of a partition in one
generation, a fenced member's commit accepted, the newest value of a record key lost to the
cleaner) yields exactly its anomaly.

The model: a few partitions, each a list of values (a value's offset is its index); writers
send one value at a time (acknowledged with its offset, failed and never written, or of
unknown outcome and written or not, after which the writer continues as a new process, as
Jepsen's clients do); readers assign every partition and poll the next records of some of
them, in order. Every op completes before its process starts another. Three variants add
transactions (committed, aborted on purpose, or of unknown outcome, read with
read_committed), a consumer group (generations that hand every partition to one member, and
commits in the current generation), and a compacted topic (record keys, tombstones, a
cleaner that keeps the newest record of each key, and a final read from the beginning)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from properties.checker import check

KEYS = ("t:0", "t:1")
WRITERS, READERS = (0, 1, 2), (10, 11)
CONFIG = {"sub_via": ["assign"]}


@dataclass
class Model:
    """A sequential partitioned log, and the history of what its clients saw."""

    ops: list[dict] = field(default_factory=list)
    logs: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k in KEYS})
    positions: dict[int, dict[str, int]] = field(default_factory=dict)
    process: dict[int, int] = field(default_factory=lambda: {w: w for w in WRITERS})
    next_value: int = 1
    acked: list[tuple[str, int, int]] = field(default_factory=list)  # (key, offset, value)
    slept_ms: int = 0  # time passed besides one millisecond an op

    def op(self, process, type_, f, value, **extra) -> dict:
        o = {"index": len(self.ops), "time": (len(self.ops) + self.slept_ms) * 1_000_000, "process": process,
             "type": type_, "f": f, "value": value, **extra}
        self.ops.append(o)
        return o

    def assign(self, reader: int) -> None:
        self.op(reader, "invoke", "assign", list(KEYS))
        self.op(reader, "ok", "assign", list(KEYS))
        self.positions[reader] = {k: 0 for k in KEYS}

    def send(self, writer: int, key: str, outcome: str, written: bool = True) -> None:
        p, v = self.process[writer], self.next_value
        self.next_value += 1
        self.op(p, "invoke", "send", [["send", key, v]])
        if outcome == "ok":
            self.logs[key].append(v)
            self.acked.append((key, len(self.logs[key]) - 1, v))
            self.op(p, "ok", "send", [["send", key, [len(self.logs[key]) - 1, v]]])
        elif outcome == "fail":
            self.op(p, "fail", "send", [["send", key, [None, v]]], error="refused")
        else:  # unknown: written or not, and the writer goes on as a new process
            if written:
                self.logs[key].append(v)
            self.op(p, "info", "send", [["send", key, v]], error="timed out")
            self.process[writer] = p + 100

    def poll(self, reader: int, counts: dict[str, int]) -> dict:
        self.op(reader, "invoke", "poll", [["poll"]])
        reads = {}
        for key, n in counts.items():
            start = self.positions[reader][key]
            got = self.logs[key][start:start + n]
            if got:  # (a hole, None, is a lost record: its offset is passed over)
                reads[key] = [[start + i, v] for i, v in enumerate(got) if v is not None]
                self.positions[reader][key] = start + len(got)
        return self.op(reader, "ok", "poll", [["poll", reads]])


STEPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from(WRITERS), st.sampled_from(KEYS),
              st.sampled_from(["ok", "ok", "ok", "ok", "fail", "info"]), st.booleans()),
    st.tuples(st.just("poll"), st.sampled_from(READERS),
              st.dictionaries(st.sampled_from(KEYS), st.integers(0, 3), min_size=1))), min_size=4, max_size=40)


def play(steps) -> Model:
    m = Model()
    for r in READERS:
        m.assign(r)
    for step in steps:
        if step[0] == "send":
            _, w, key, outcome, written = step
            m.send(w, key, outcome, written)
        elif step[0] == "txn":
            _, w, keys, outcome, written = step
            txn(m, w, keys, outcome, written)
        else:
            m.poll(step[1], step[2])
    for r in READERS:  # each reader reads on to the end
        m.poll(r, {k: len(m.logs[k]) for k in KEYS})
    return m


def kinds(m: Model) -> set[str]:
    return set(check(m.ops, CONFIG)["anomaly_types"])


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.filter_too_much])


@SETTINGS
@given(STEPS)
def test_a_history_of_the_model_is_valid(steps):
    m = play(steps)
    result = check(m.ops, CONFIG)
    assert result["valid"] is True, result["anomaly_types"]


@SETTINGS
@given(STEPS, st.data())
def test_an_idempotent_producer_told_its_sequence_is_out_of_order_without_a_loss_is_reported(steps, data):
    m = play(steps)
    config = {**CONFIG, "idempotence": True}
    assert check(m.ops, config)["valid"] is True  # refused and unanswered sends are fine
    error = data.draw(st.sampled_from(["OUT_OF_ORDER_SEQUENCE_NUMBER", "PRODUCER_FENCED",
                                       "REQUEST_TIMED_OUT,OUT_OF_ORDER_SEQUENCE_NUMBER"]))
    key = data.draw(st.sampled_from(KEYS))
    p = m.process[WRITERS[1]]
    m.op(p, "invoke", "send", [["send", key, m.next_value]])
    m.op(p, data.draw(st.sampled_from(["fail", "info"])), "send", [["send", key, m.next_value]], error=error)
    assert set(check(m.ops, config)["anomaly_types"]) == {"idempotence-error"}
    assert check(m.ops, CONFIG)["valid"] is True  # not idempotent: no promise


@SETTINGS
@given(STEPS, st.data())
def test_a_write_lost_after_it_was_acknowledged_is_a_lost_write(steps, data):
    """An acknowledged record vanishes from the log (its offset stays a hole, as after a
    leader's loss that later writes do not refill) while the next one is read: lost, and
    every reader that had read the partition before jumped over it."""
    m = play(steps)
    key = data.draw(st.sampled_from(KEYS))
    had_read = any(m.positions[r][key] > 0 for r in READERS)
    m.send(WRITERS[0], key, "ok")
    lost = len(m.logs[key]) - 1
    m.send(WRITERS[0], key, "ok")
    m.logs[key][lost] = None
    for r in READERS:
        m.poll(r, {key: 2})
    assert kinds(m) == {"lost-write"} | ({"poll-skip"} if had_read else set())


@SETTINGS
@given(STEPS, st.data())
def test_a_record_read_twice_at_two_offsets_is_a_duplicate(steps, data):
    m = play(steps)
    assume(m.acked)
    key, _offset, value = data.draw(st.sampled_from(m.acked))
    # the record was written twice (a retry the log did not recognise): a new last offset
    m.logs[key].append(value)
    for r in READERS:
        m.poll(r, {key: 1})
    # and each reader, having read it at its first offset, went back to it: nonmonotonic too
    # (as Jepsen's checker orders values by their first offset)
    assert kinds(m) == {"duplicate", "nonmonotonic-poll"}


@SETTINGS
@given(STEPS, st.data())
def test_a_reader_that_goes_back_is_a_nonmonotonic_poll(steps, data):
    m = play(steps)
    reader = data.draw(st.sampled_from(READERS))
    read = [k for k in KEYS if m.positions[reader][k] >= 2]
    assume(read)
    key = data.draw(st.sampled_from(read))
    m.positions[reader][key] -= 2  # rewound (a consumer reset behind its own position)
    m.poll(reader, {key: 1})
    assert kinds(m) == {"nonmonotonic-poll"}


@SETTINGS
@given(STEPS, st.data())
def test_a_reader_that_jumps_over_a_record_is_a_poll_skip(steps, data):
    m = play(steps)
    reader = data.draw(st.sampled_from(READERS))
    key = data.draw(st.sampled_from(KEYS))
    assume(m.positions[reader][key] > 0)  # a skip shows against the reader's last read
    m.send(WRITERS[0], key, "ok")
    m.send(WRITERS[0], key, "ok")
    m.positions[reader][key] += 1  # skipped (a consumer seeking past a record)
    m.poll(reader, {key: 1})
    other = READERS[1] if reader == READERS[0] else READERS[0]
    m.poll(other, {key: len(m.logs[key])})  # the other reader sees the skipped one: not lost
    assert kinds(m) == {"poll-skip"}


@SETTINGS
@given(STEPS, st.data())
def test_a_read_of_a_failed_send_is_an_aborted_read(steps, data):
    m = play(steps)
    key = data.draw(st.sampled_from(KEYS))
    m.send(WRITERS[1], key, "fail")
    failed = m.next_value - 1
    m.logs[key].append(failed)  # written although its send definitely failed
    for r in READERS:
        m.poll(r, {key: 1})
    assert kinds(m) == {"G1a"}


@SETTINGS
@given(STEPS, st.data())
def test_one_offset_given_out_twice_is_inconsistent_offsets(steps, data):
    m = play(steps)
    assume(m.acked)
    key, offset, _value = data.draw(st.sampled_from(m.acked))
    # a later acknowledged send, by a new writer, is told the same offset (the log was cut back
    # and refilled)
    p, v = 30, m.next_value
    m.next_value += 1
    m.op(p, "invoke", "send", [["send", key, v]])
    m.op(p, "ok", "send", [["send", key, [offset, v]]])
    # and a new reader reads it there (unread, it would also be a lost write)
    m.op(20, "invoke", "poll", [["poll"]])
    m.op(20, "ok", "poll", [["poll", {key: [[offset, v]]}]])
    assert kinds(m) == {"inconsistent-offsets"}


# ---------------------------------------------------------------- transactions


TXN_CONFIG = {"sub_via": ["assign"], "txn": True, "isolation_level": "read_committed"}


def txn(m: Model, writer: int, keys: list[str], outcome: str, written: bool = True) -> list[tuple[str, int]]:
    """One transaction of a send to each of ``keys``: committed (``ok``), aborted (``fail``:
    read_committed readers never see it), or of unknown outcome (``info``: committed or not,
    and the writer goes on as a new process). Returns its (key, value) sends."""
    p = m.process[writer]
    sends = []
    for key in keys:
        sends.append((key, m.next_value))
        m.next_value += 1
    m.op(p, "invoke", "txn", [["send", k, v] for k, v in sends])
    if outcome == "ok" or (outcome == "info" and written):
        done = []
        for k, v in sends:
            m.logs[k].append(v)
            if outcome == "ok":
                m.acked.append((k, len(m.logs[k]) - 1, v))
            done.append(["send", k, [len(m.logs[k]) - 1, v]])
        if outcome == "ok":
            m.op(p, "ok", "txn", done)
            return sends
    if outcome == "fail":
        m.op(p, "fail", "txn", [["send", k, v] for k, v in sends], error="intentional-abort")
    else:
        m.op(p, "info", "txn", [["send", k, v] for k, v in sends], error="unknown-outcome")
        m.process[writer] = p + 100
    return sends


TXN_STEPS = st.lists(st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(WRITERS), st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
              st.sampled_from(["ok", "ok", "ok", "fail", "info"]), st.booleans()),
    st.tuples(st.just("poll"), st.sampled_from(READERS),
              st.dictionaries(st.sampled_from(KEYS), st.integers(0, 3), min_size=1))), min_size=4, max_size=30)


@SETTINGS
@given(TXN_STEPS)
def test_a_transactional_history_of_the_model_is_valid(steps):
    m = play(steps)
    assert check(m.ops, TXN_CONFIG)["valid"] is True, check(m.ops, TXN_CONFIG)["anomaly_types"]


@SETTINGS
@given(TXN_STEPS, st.data())
def test_a_read_of_an_aborted_transaction_is_an_aborted_read(steps, data):
    m = play(steps)
    keys = data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3))
    for k, v in txn(m, WRITERS[2], keys, "fail"):
        m.logs[k].append(v)  # the abort was not honoured: its records are read_committed-visible
    for r in READERS:
        m.poll(r, {k: len(m.logs[k]) for k in KEYS})
    assert set(check(m.ops, TXN_CONFIG)["anomaly_types"]) == {"G1a"}


# ---------------------------------------------------------------- a consumer group


GKEYS = ("g:0", "g:1", "g:2")
MEMBERS = (20, 21, 22)
SESSION_MS = 3_000
GROUP_CONFIG = {"sub_via": ["subscribe"], "timings_ms": {"member_session_timeout_ms": SESSION_MS},
                "groups": {"group": "g", "assignor": "range", "keys": list(GKEYS), "final_polls": False}}


@dataclass
class Group:
    """Members of one consumer group; each generation hands every partition to one member."""

    m: Model = field(default_factory=Model)
    generation: int = 0
    held: dict[int, int] = field(default_factory=dict)  # member -> the generation it holds
    owned: dict[int, list[str]] = field(default_factory=dict)
    offset: int = 0  # the offset the next commit sets (committed offsets only go forward)

    def start(self) -> None:
        m = self.m
        for p in MEMBERS:
            m.op(p, "invoke", "subscribe", list(GKEYS))
            m.op(p, "ok", "subscribe", list(GKEYS))
        m.assign(READERS[0])  # and something to judge besides the group: a write read back
        m.send(WRITERS[0], KEYS[0], "ok")
        m.poll(READERS[0], {KEYS[0]: 1})

    def rebalance(self, owners: list[int], extra: tuple[int, str] | None = None,
                  cooperative: bool = False) -> None:
        """A new generation: partition ``GKEYS[i]`` to member ``owners[i]``; each member's
        poll reports its revocations (eager: everything, in the generation it held) and its
        assignment (``extra``: one more member given one more partition; ``cooperative``:
        members revoke only what moved, in the new generation, and keep the rest)."""
        self.generation += 1
        for p in MEMBERS:
            owned = [k for k, o in zip(GKEYS, owners, strict=True) if o == p]
            if extra is not None and extra[0] == p and extra[1] not in owned:
                owned.append(extra[1])
            before = self.owned.get(p, [])
            revoked = [k for k in before if k not in owned] if cooperative else before
            log = [{"type": "revoked", "generation": self.generation if cooperative else self.held[p],
                    "keys": revoked}] if revoked else []
            self.owned[p], self.held[p] = owned, self.generation
            self.m.op(p, "invoke", "poll", [["poll"]])
            self.m.op(p, "ok", "poll", [["poll", {}]], rebalance_log=[
                *log, {"type": "assigned", "generation": self.generation, "owned": owned, "keys": owned}])

    def move(self, owners: list[int]) -> None:
        """A cooperative rebalance in KIP-429's two phases: the partitions that change owner
        are revoked in one generation (nobody gets them) and handed over in the next."""
        now = {k: p for p in MEMBERS for k in self.owned.get(p, [])}
        self.rebalance([o if now.get(k) == o else None for k, o in zip(GKEYS, owners, strict=True)],
                       cooperative=True)
        self.rebalance(owners, cooperative=True)

    def pause(self, member: int, ms: int) -> None:
        """The member's process stops for ``ms`` (the nemesis ops name its process)."""
        for f in ("pause", "resume"):
            self.m.op("nemesis", "invoke", f, {"nodes": [100 + member], "processes": [member]})
            self.m.op("nemesis", "info", f, {"nodes": [100 + member], "processes": [member]})
            if f == "pause":
                self.m.slept_ms += ms

    def poll_all(self) -> None:
        """Every member polls on (a member's claim lasts until its last op)."""
        for p in MEMBERS:
            self.m.op(p, "invoke", "poll", [["poll"]])
            self.m.op(p, "ok", "poll", [["poll", {}]])

    def commit(self, member: int, generation: int | None = None, offset: int | None = None) -> None:
        if offset is None:
            self.offset += 1
        value = {k: self.offset if offset is None else offset for k in self.owned.get(member, [])} or {
            GKEYS[0]: self.offset if offset is None else offset}
        gen = self.held.get(member, 0) if generation is None else generation
        self.m.op(member, "invoke", "commit", value, generation=gen)
        self.m.op(member, "ok", "commit", value, generation=gen)


OWNERS = st.lists(st.sampled_from(MEMBERS), min_size=3, max_size=3)
GROUP_STEPS = st.lists(st.one_of(
    st.tuples(st.just("rebalance"), OWNERS), st.tuples(st.just("move"), OWNERS),
    st.tuples(st.just("commit"), st.sampled_from(MEMBERS)),
    # a member paused for less than its session timeout keeps its membership
    st.tuples(st.just("pause"), st.sampled_from(MEMBERS), st.integers(0, SESSION_MS))), min_size=1, max_size=20)


def play_group(steps) -> Group:
    g = Group()
    g.start()
    g.rebalance(list(MEMBERS))
    for step in steps:
        if step[0] == "rebalance":
            g.rebalance(step[1])
        elif step[0] == "move":
            g.move(step[1])
        elif step[0] == "pause":
            g.pause(step[1], step[2])
        else:
            g.commit(step[1])
    return g


@SETTINGS
@given(GROUP_STEPS)
def test_a_group_history_of_the_model_is_valid(steps):
    g = play_group(steps)
    assert check(g.m.ops, GROUP_CONFIG)["valid"] is True, check(g.m.ops, GROUP_CONFIG)["anomaly_types"]


@SETTINGS
@given(GROUP_STEPS, st.data())
def test_a_second_owner_in_one_generation_is_double_ownership(steps, data):
    g = play_group(steps)
    owners = data.draw(st.lists(st.sampled_from(MEMBERS), min_size=3, max_size=3))
    key = data.draw(st.sampled_from(GKEYS))
    second = data.draw(st.sampled_from([p for p in MEMBERS if p != owners[GKEYS.index(key)]]))
    g.rebalance(owners, extra=(second, key))
    g.poll_all()
    assert set(check(g.m.ops, GROUP_CONFIG)["anomaly_types"]) == {"double-ownership"}


@SETTINGS
@given(GROUP_STEPS, st.data())
def test_a_commit_of_a_replaced_generation_accepted_is_a_fenced_commit(steps, data):
    g = play_group(steps)
    stale = g.generation
    g.rebalance(data.draw(st.lists(st.sampled_from(MEMBERS), min_size=3, max_size=3)))
    g.commit(data.draw(st.sampled_from(MEMBERS)), generation=stale)
    assert set(check(g.m.ops, GROUP_CONFIG)["anomaly_types"]) == {"fenced-commit"}


@SETTINGS
@given(GROUP_STEPS, OWNERS, st.data())
def test_a_partition_handed_over_in_the_generation_it_was_revoked_in_is_reassigned_before_revoked(
        steps, owners, data):
    """A cooperative rebalance in one phase: the new owner gets the partition in the very
    generation its previous owner revokes it in."""
    g = play_group(steps)
    now = {k: p for p in MEMBERS for k in g.owned.get(p, [])}
    key = data.draw(st.sampled_from(sorted(now)))
    owners[GKEYS.index(key)] = data.draw(st.sampled_from([p for p in MEMBERS if p != now[key]]))
    g.rebalance(owners, cooperative=True)
    assert set(check(g.m.ops, GROUP_CONFIG)["anomaly_types"]) == {"reassigned-before-revoked"}


@SETTINGS
@given(GROUP_STEPS, st.sampled_from(MEMBERS), st.integers(SESSION_MS + 1_001, 5 * SESSION_MS))
def test_a_commit_accepted_after_a_pause_past_the_session_timeout_is_an_expired_member_commit(
        steps, member, ms):
    g = play_group(steps)
    g.pause(member, ms)
    g.commit(member)
    assert set(check(g.m.ops, GROUP_CONFIG)["anomaly_types"]) == {"expired-member-commit"}


@SETTINGS
@given(GROUP_STEPS, st.sampled_from(MEMBERS), st.data())
def test_an_accepted_commit_below_an_earlier_one_is_a_committed_offset_regressed(steps, member, data):
    g = play_group(steps)
    g.commit(member)
    assume(g.owned.get(member))
    key = g.owned[member][0]
    behind = data.draw(st.integers(0, g.offset - 1))
    other = data.draw(st.sampled_from(MEMBERS))
    g.m.op(other, "invoke", "commit", {key: behind}, generation=g.held[other])
    g.m.op(other, "ok", "commit", {key: behind}, generation=g.held[other])
    assert set(check(g.m.ops, GROUP_CONFIG)["anomaly_types"]) == {"committed-offset-regressed"}


# ---------------------------------------------------------------- a compacted topic


RECORD_KEYS = ("k0", "k1", "k2")


@dataclass
class Compacted:
    """One compacted partition: keyed records (None: a tombstone), a cleaner that removes
    every record a newer one of its record key superseded (a hole keeps its offset), and a
    final read from the beginning."""

    m: Model = field(default_factory=Model)
    log: list = field(default_factory=list)  # (value, record key), or None where cleaned
    acked: list = field(default_factory=list)  # (offset, value, record key)

    def send(self, rk: str, tombstone: bool) -> None:
        m = self.m
        v = None if tombstone else m.next_value
        m.next_value += 0 if tombstone else 1
        m.op(WRITERS[0], "invoke", "send", [["send", KEYS[0], v, rk]])
        self.log.append((v, rk))
        self.acked.append((len(self.log) - 1, v, rk))
        m.op(WRITERS[0], "ok", "send", [["send", KEYS[0], [len(self.log) - 1, v], rk]])

    def clean(self) -> None:
        newest = {}
        for off, rec in enumerate(self.log):
            if rec is not None:
                newest[rec[1]] = off
        self.log = [rec if rec is None or newest[rec[1]] == off else None for off, rec in enumerate(self.log)]

    def read(self, reader: int, start: int, n: int) -> int:
        """A poll of up to ``n`` records from ``start`` (holes passed over); the next position."""
        got, off = [], start
        while off < len(self.log) and len(got) < n:
            if self.log[off] is not None:
                got.append([off, self.log[off][0], self.log[off][1]])
            off += 1
        self.m.op(reader, "invoke", "poll", [["poll"]])
        self.m.op(reader, "ok", "poll", [["poll", {KEYS[0]: got} if got else {}]])
        return off

    def finish(self) -> dict:
        """The final read from the beginning; the run's config."""
        m = self.m
        start = len(m.ops) * 1_000_000
        m.op(99, "invoke", "assign", [KEYS[0]], seek_to_beginning=True)
        m.op(99, "ok", "assign", [KEYS[0]], seek_to_beginning=True)
        self.read(99, 0, len(self.log))
        return {"sub_via": ["assign"], "compacted": True, "idempotence": True,
                "final_read": {"performed": True, "reached_end": True, "start_ns": start,
                               "end_offsets": {KEYS[0]: len(self.log)}}}


COMPACTION_STEPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from(RECORD_KEYS), st.sampled_from([False, False, False, True])),
    st.tuples(st.just("clean")), st.tuples(st.just("poll"), st.integers(1, 4))), min_size=1, max_size=30)


def play_compacted(steps) -> Compacted:
    c = Compacted()
    c.m.assign(READERS[0])
    position = 0
    for step in steps:
        if step[0] == "send":
            c.send(step[1], step[2])
        elif step[0] == "clean":
            c.clean()
        else:
            position = c.read(READERS[0], position, step[1])
    return c


@SETTINGS
@given(COMPACTION_STEPS)
def test_a_compacted_history_of_the_model_is_valid(steps):
    c = play_compacted(steps)
    c.send("k0", False)  # a value to judge, whatever the program did
    config = c.finish()
    assert check(c.m.ops, config)["valid"] is True, check(c.m.ops, config)["anomaly_types"]


@SETTINGS
@given(COMPACTION_STEPS, st.data())
def test_the_cleaner_losing_a_record_keys_newest_value_is_compaction_lost_latest(steps, data):
    c = play_compacted(steps)
    rk = data.draw(st.sampled_from(RECORD_KEYS))
    c.send(rk, False)
    c.clean()
    c.log[-1] = None  # the cleaner removed the newest record of ``rk`` (as compaction-drops-latest)
    kinds = set(check(c.m.ops, c.finish())["anomaly_types"])
    # the newest value is gone, and it is an acknowledged write the final read did not see
    assert kinds == {"compaction-lost-latest", "unread-after-heal"}, kinds


@SETTINGS
@given(COMPACTION_STEPS, st.data())
def test_a_reader_from_the_beginning_missing_a_newest_record_is_reported(steps, data):
    """The cleaner removes the newest record of a key (a value, or a delete marker well within
    delete.retention.ms) while a reader goes back to the beginning and reads past it."""
    c = play_compacted(steps)
    rk = data.draw(st.sampled_from(RECORD_KEYS))
    tombstone = data.draw(st.booleans())
    c.send(rk, tombstone)
    c.send(next(k for k in RECORD_KEYS if k != rk), False)  # something after it to read
    c.log[-2] = None
    c.m.op(READERS[1], "invoke", "assign", [KEYS[0]], seek_to_beginning=True)
    c.m.op(READERS[1], "ok", "assign", [KEYS[0]], seek_to_beginning=True)
    c.read(READERS[1], 0, len(c.log))
    kinds = set(check(c.m.ops, c.finish())["anomaly_types"])
    assert ("tombstone-missing" if tombstone else "scan-missed-latest") in kinds, kinds


def test_the_properties_find_a_planted_checker_bug(monkeypatch):
    """A checker bug planted on purpose, an off-by-one that lets a reader jump over exactly
    one record unnoticed (``delta > 2`` for ``delta > 1`` in properties/jepsen_checks.py's skip check),
    is found by the properties above, with the smallest history that shows it."""
    import pytest

    import properties.jepsen_checks as checker

    real = checker._across

    def planted(a, key, prev, op, v2, add, skip, nonmono, verb):
        o = a.orders.get(key)
        if o is not None and prev[1] is not None and o.first.get(v2, 0) - o.first.get(prev[1], 0) == 2:
            return  # the planted bug: a skip of one record is not reported
        real(a, key, prev, op, v2, add, skip, nonmono, verb)

    monkeypatch.setenv("KAFKACHECK_CHECKER", "python")  # the bug is planted in the Python checker
    monkeypatch.setattr(checker, "_across", planted)
    with pytest.raises(AssertionError, match="poll-skip"):
        test_a_reader_that_jumps_over_a_record_is_a_poll_skip()
    monkeypatch.setattr(checker, "_across", real)
    test_a_reader_that_jumps_over_a_record_is_a_poll_skip()

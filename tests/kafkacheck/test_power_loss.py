"""A power loss of an Apache Kafka node, on disk: cut_to_flushed keeps what Kafka had certainly
flushed (the recovery point checkpoint, or the base of the newest segment whose predecessor
rolled ROLL_FLUSH_MS before the node stopped: a rolled segment is flushed a moment later) and
cuts the rest at a batch boundary, leaving the KRaft metadata log alone. The real
thing (Kafka recovering such a directory, and the election that follows) is the slow calibration
of tests/kafkacheck/test_real_bugs.py."""

from __future__ import annotations

from pathlib import Path

from kafkacheck.conform.apache_kafka import RECOVERY_POINTS, cut_to_flushed
from reference import records as rec


def _segment(path: Path, offsets: range) -> list[int]:
    """A segment of one-record batches at ``offsets``; the byte position of each batch."""
    data, positions = b"", []
    for o in offsets:
        positions.append(len(data))
        data += rec.encode_batch([rec.RecordInput(None, b"v%d" % o, (), 0)], base_offset=o)
    path.write_bytes(data)
    return positions


def test_each_partition_is_cut_back_to_what_was_flushed(tmp_path):
    (tmp_path / RECOVERY_POINTS).write_text("0\n3\nq 0 3\nq 1 0\nq 2 4\n")
    q0, q1, q2, meta = (tmp_path / n for n in ("q-0", "q-1", "q-2", "__cluster_metadata-0"))
    for d in (q0, q1, q2, meta):
        d.mkdir()
    _segment(q0 / f"{0:020d}.log", range(0, 5))
    first_whole = (q0 / f"{0:020d}.log").read_bytes()
    _segment(q0 / f"{5:020d}.log", range(5, 8))  # rolled at 5: everything below is flushed
    positions = _segment(q1 / f"{0:020d}.log", range(0, 5))
    (q1 / f"{4:020d}.snapshot").write_bytes(b"state")
    (q1 / f"{0:020d}.snapshot").write_bytes(b"state")
    _segment(q2 / f"{0:020d}.log", range(0, 4))  # flushed to its end
    _segment(meta / f"{0:020d}.log", range(0, 6))
    meta_bytes = (meta / f"{0:020d}.log").read_bytes()

    assert cut_to_flushed(tmp_path) == {"q-0": [5, 8], "q-1": [0, 5]}
    assert (q0 / f"{0:020d}.log").read_bytes() == first_whole
    assert (q0 / f"{5:020d}.log").read_bytes() == b""
    assert (q1 / f"{0:020d}.log").stat().st_size == positions[0] == 0
    assert not (q1 / f"{4:020d}.snapshot").exists() and (q1 / f"{0:020d}.snapshot").exists()
    assert (meta / f"{0:020d}.log").read_bytes() == meta_bytes  # Raft flushed it before acknowledging


def test_a_cut_inside_a_segment_lands_on_a_batch_boundary(tmp_path):
    (tmp_path / RECOVERY_POINTS).write_text("0\n1\nq 0 3\n")
    (tmp_path / "q-0").mkdir()
    positions = _segment(tmp_path / "q-0" / f"{0:020d}.log", range(0, 6))
    assert cut_to_flushed(tmp_path) == {"q-0": [3, 6]}
    assert (tmp_path / "q-0" / f"{0:020d}.log").stat().st_size == positions[3]
    assert cut_to_flushed(tmp_path) == {}  # nothing more to lose


def test_a_zeroed_or_torn_tail_ends_the_log_where_its_last_whole_batch_ends(tmp_path):
    (tmp_path / RECOVERY_POINTS).write_text("0\n1\nq 0 2\n")
    (tmp_path / "q-0").mkdir()
    seg = tmp_path / "q-0" / f"{0:020d}.log"
    _segment(seg, range(0, 4))
    whole = seg.read_bytes()
    seg.write_bytes(whole + bytes(4096))  # zeros after the last batch (a preallocated file)
    assert cut_to_flushed(tmp_path) == {"q-0": [2, 4]}
    _segment(seg, range(0, 4))
    seg.write_bytes(seg.read_bytes()[:-10])  # the last batch torn: offset 3 was never whole
    assert cut_to_flushed(tmp_path) == {"q-0": [2, 3]}


def test_a_segment_that_rolled_just_before_the_node_stopped_was_not_yet_flushed(tmp_path):
    """Kafka flushes a rolled segment a moment after the roll (its scheduler's flush-log task):
    a node stopped within ROLL_FLUSH_MS of a roll loses the rolled segment's unflushed tail and
    every later segment, index files included; stopped later, only the newest segment's."""
    import os

    from reference.log import ROLL_FLUSH_MS

    (tmp_path / RECOVERY_POINTS).write_text("0\n1\nq 0 2\n")
    q0 = tmp_path / "q-0"
    q0.mkdir()
    _segment(q0 / f"{0:020d}.log", range(0, 5))
    _segment(q0 / f"{5:020d}.log", range(5, 8))
    (q0 / f"{5:020d}.index").write_bytes(bytes(8))
    rolled_at = 1_000_000.0
    os.utime(q0 / f"{0:020d}.log", (rolled_at, rolled_at))
    before = {p.name: p.read_bytes() for p in q0.iterdir()}
    assert cut_to_flushed(tmp_path, stopped_at=rolled_at + ROLL_FLUSH_MS / 2000) == {"q-0": [2, 8]}
    assert sorted(p.name for p in q0.iterdir()) == [f"{0:020d}.log"]
    for name, data in before.items():  # as before the power loss
        (q0 / name).write_bytes(data)
    os.utime(q0 / f"{0:020d}.log", (rolled_at, rolled_at))
    assert cut_to_flushed(tmp_path, stopped_at=rolled_at + ROLL_FLUSH_MS / 1000) == {"q-0": [5, 8]}
    assert (q0 / f"{0:020d}.log").read_bytes() == before[f"{0:020d}.log"]
    assert (q0 / f"{5:020d}.log").read_bytes() == b"" and (q0 / f"{5:020d}.index").exists()

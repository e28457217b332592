"""A power loss of a served broker: the file storage writes down what it flushed, lose_unflushed
cuts a stopped node's files back to it, and the node, started again, knows it lost writes (and
tells the controller: KIP-966's unclean shutdown)."""

from __future__ import annotations

from reference import records as rec
from reference.log import PartitionLog
from reference.log_config import LogConfig
from reference.server.storage import FLUSHED, POWER_LOSS, FileStorage, flushed_sizes, lose_unflushed


def test_flushed_sizes_are_written_down_and_kept_across_restarts(tmp_path):
    s = FileStorage(tmp_path)
    s.append("t-0/0.log", b"aaaa")
    s.flush("t-0/0.log")
    s.append("t-0/0.log", b"bbb")  # not flushed
    s.append("t-0/7.log", b"cc")  # never flushed
    s.replace("t-0/meta", b"{}")  # durable by itself: not tracked
    assert flushed_sizes(tmp_path) == {"t-0/0.log": 4, "t-0/7.log": 0}
    s.close()
    again = FileStorage(tmp_path)
    assert not again.lost_power
    again.truncate("t-0/0.log", 2)  # a truncation below the flushed size lowers it
    again.delete("t-0/7.log")
    assert flushed_sizes(tmp_path) == {"t-0/0.log": 2}
    assert again.list("") == ["t-0/0.log", "t-0/meta"]  # its own files are not the engine's
    again.close()


def test_lose_unflushed_cuts_each_file_to_its_flushed_size_and_tells_the_next_start(tmp_path):
    s = FileStorage(tmp_path)
    s.append("t-0/0.log", b"aaaa")
    s.flush("t-0/0.log")
    s.append("t-0/0.log", b"bbb")
    s.append("t-0/7.log", b"cc")
    s.replace("t-0/meta", b'{"high_watermark": 9}')
    s.close()
    assert lose_unflushed(tmp_path) == {"t-0/0.log": 3, "t-0/7.log": 2}
    assert (tmp_path / "t-0/0.log").read_bytes() == b"aaaa" and (tmp_path / "t-0/7.log").read_bytes() == b""
    assert (tmp_path / "t-0/meta").read_bytes() == b'{"high_watermark": 9}'
    assert (tmp_path / POWER_LOSS).exists()
    after = FileStorage(tmp_path)
    assert after.lost_power
    assert FileStorage(tmp_path).lost_power  # killed again before a clean shutdown: still unclean
    after.mark_clean()  # a clean shutdown (everything flushed)
    assert not FileStorage(tmp_path).lost_power


def test_a_log_after_a_power_loss_holds_what_was_flushed(tmp_path):
    s = FileStorage(tmp_path)
    log = PartitionLog.open(s, "t-0", LogConfig(flush_messages=3))
    for i in range(5):  # the third append flushes the log; the last two stay unflushed
        log.append_as_leader(rec.encode_batch([rec.RecordInput(None, b"v%d" % i, (), 0)]), 0)
    log.high_watermark = 5
    log.checkpoint()
    s.close()
    lose_unflushed(tmp_path)
    recovered = PartitionLog.open(FileStorage(tmp_path), "t-0")
    assert recovered.log_end_offset == 3
    assert recovered.high_watermark == 3  # the checkpointed high watermark is clamped to the log


def test_what_a_file_held_before_its_first_append_is_durable(tmp_path):
    """replace() writes a whole file durably; a later append to it loses only the appended part."""
    s = FileStorage(tmp_path)
    s.replace("t-0/meta.log", b"durable")
    s.append("t-0/meta.log", b"+tail")
    s.close()
    assert flushed_sizes(tmp_path) == {"t-0/meta.log": 7}
    assert lose_unflushed(tmp_path) == {"t-0/meta.log": 5}
    assert (tmp_path / "t-0/meta.log").read_bytes() == b"durable"


def test_a_flush_appends_one_line_to_the_journal_and_never_rewrites_it(tmp_path):
    """With flush.messages=1 every append flushes: each costs one line, whatever the number of
    files; the journal is compacted only when a storage opens."""
    s = FileStorage(tmp_path)
    journal = tmp_path / FLUSHED
    inode = journal.stat().st_ino
    for i in range(50):
        s.append(f"t-{i % 5}/0.log", b"x")
        s.flush(f"t-{i % 5}/0.log")
    assert journal.stat().st_ino == inode  # appended to, not replaced
    assert len(journal.read_text().splitlines()) == 5 + 50  # each file's first size, then a line a flush
    assert flushed_sizes(tmp_path) == {f"t-{i}/0.log": 10 for i in range(5)}
    s.close()
    FileStorage(tmp_path).close()
    assert len(journal.read_text().splitlines()) == 5  # compacted on opening
    with open(journal, "a") as f:
        f.write("7\tt-0/0.l")  # a line cut short by a kill mid-write
    assert flushed_sizes(tmp_path) == {f"t-{i}/0.log": 10 for i in range(5)}

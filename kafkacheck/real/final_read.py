"""After healing: every partition read from the beginning to its end offset.

End offsets are asked again until the broker answers (right after a restart leadership may
still move), and with read_committed until the last stable offset reaches the high
watermark (a transaction whose producer vanished stays open until the coordinator aborts
it); a partition without an end offset never counts as read to its end.
"""

from __future__ import annotations

import time

from kafkacheck.real.wall_history import History


def final_committed(h: History, client, group: str, topic: str, partitions: int) -> None:
    """eos: the group's committed offsets of ``topic``, as a ``committed`` op."""
    process = h.new_process()
    keys = [f"{topic}:{p}" for p in range(partitions)]
    h.op(process, "invoke", "committed", keys)
    got: dict[str, int | None] = {}
    for p in range(partitions):
        off = client.committed(group, topic, p)
        if isinstance(off, str):
            h.op(process, "fail", "committed", keys, error=off[:80])
            return
        got[f"{topic}:{p}"] = off if off >= 0 else None
    h.op(process, "ok", "committed", got)


def final_read(h: History, reader, keys: list[str], end_offsets: dict[str, int],
               reached: dict[str, int] | None = None) -> bool:
    """Read every partition (``keys``) with ``reader`` (a fresh poller of those partitions)
    from the beginning up to its end offset; True when it got there (never for a partition
    whose end offset the broker did not tell). ``reached`` gets the position it read each
    partition to (run.json's ``final_read.positions``)."""
    process = h.new_process()
    h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
    h.op(process, "ok", "assign", keys, seek_to_beginning=True)
    positions = {k: 0 for k in keys}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(positions[k] < end_offsets.get(k, 0) for k in keys):
        h.op(process, "invoke", "poll", [["poll"]])
        try:
            got = reader.poll()
            positions = reader.positions(positions)
        except Exception as e:
            h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
            break
        h.op(process, "ok", "poll", [["poll", got]])
    reader.close()
    if reached is not None:
        reached.update(positions)
    # positions, not the last offset read: transaction markers take offsets too
    return all(k in end_offsets and positions[k] >= end_offsets[k] for k in keys)


def uncommitted_read(reader, highs: dict[str, int], deadline_s: float = 30.0) -> dict[str, list]:
    """Every data record of each partition of ``highs`` up to its high watermark, read with
    ``reader`` (a fresh read_uncommitted poller of those partitions, from the beginning):
    ``{key: [[offset, value], ...]}``. Not a history op (its reads would be aborted reads):
    run.json's ``final_read.uncommitted``, where the checker finds a transaction's records that
    were aborted, and the offsets without a data record (the control records: markers)."""
    got: dict[str, list] = {}
    positions = dict.fromkeys(highs, 0)
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline and any(positions[k] < highs[k] for k in highs):
            for key, pairs in reader.poll().items():
                if key in highs:
                    got.setdefault(key, []).extend(pair[:2] for pair in pairs)
            positions = reader.positions(positions)
    finally:
        reader.close()
    return {k: sorted(v, key=lambda pair: pair[0]) for k, v in sorted(got.items())}


def end_offsets(client, topic: str, partitions: int, isolation: str, deadline: float,
                stable: dict[str, list[int]] | None = None) -> tuple[dict[str, int], dict[str, str]]:
    """Every partition's end offset, asked of ``client`` (a case client of
    :mod:`kafkacheck.real.kinds`) again until ``deadline`` (time.monotonic()) for those it
    could not answer yet (right after a restart leadership may still move) or, with
    read_committed, whose last stable offset is still below the high watermark; the end
    offsets, and the last error of every partition still without one. With read_committed,
    ``stable`` gets the last ``[last stable offset, high watermark]`` the broker told of each
    partition (run.json's ``final_read.stable_offsets``)."""
    out: dict[str, int] = {}
    errors: dict[str, str] = {}
    pending = list(range(partitions))
    while True:
        for p in list(pending):
            key = f"{topic}:{p}"
            offs = client.offsets(topic, p, isolation)
            if isinstance(offs, str):
                errors[key] = offs
                continue
            if isolation == "read_committed":
                # the read_committed end is the last stable offset: below the high watermark
                # while a transaction is open (one whose producer vanished stays open until
                # the coordinator times it out and aborts it), and committed records past it
                # cannot be read yet
                high = client.offsets(topic, p, "read_uncommitted")
                if isinstance(high, str):
                    errors[key] = high
                    continue
                if stable is not None:
                    stable[key] = [offs[1], high[1]]
                if offs[1] < high[1]:
                    errors[key] = (f"the last stable offset {offs[1]} is below the high watermark {high[1]}: "
                                   "a transaction is still open")
                    continue
            out[key] = offs[1]
            errors.pop(key, None)
            pending.remove(p)
        if not pending or time.monotonic() >= deadline:
            return out, errors
        time.sleep(0.5)

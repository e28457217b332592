"""The follower side of replication: one fetcher per leader broker (Kafka's ReplicaFetcherThread).

Rules (docs/explanation/protocol-notes.md section 1):

* A follower fetches every partition it follows from one broker in one Fetch, with the
  epoch it follows in and its last fetched epoch (rule 1: the leader answers a divergence
  with the diverging epoch, and the follower truncates there before it appends anything).
* An answer applies to a partition only while the partition's leader epoch and log end are
  what the request asked with (the request may have waited at a leader while the partition
  moved away and back); a late or superseded answer is dropped.
* Records are appended only where they continue the log; then the high watermark, then the
  log start offset (which never passes the high watermark), as Kafka's
  ``processPartitionData``. An error backs the fetcher off; a fetch without an answer in
  ``replica_fetch_timeout_ms`` closes its connection and is sent again on a new one.
* Kafka shuts idle fetchers down after every leadership change: a fetcher with no partition
  left goes (its answer is ignored), and following that broker again starts a new one.
"""

from __future__ import annotations

from reference import records as rec
from reference.broker_state import REPLICA_FETCH_MAX_BYTES, REPLICA_FETCH_RESPONSE_MAX_BYTES, BrokerState, Fetcher
from reference.bugs import Bug
from reference.errors import Errors
from reference.marks import mark
from reference.messages import FetchedPartition, FetchPartition, FetchRequest, FetchResponse
from reference.partition import Partition, Role
from reference.storage import StorageError


def sync_fetchers(b: BrokerState, now_ms: int) -> None:
    """A fetcher for each broker this one follows a partition of, and none for any other."""
    leaders = {p.leader for p in b.partitions.values() if p.role is Role.FOLLOWER and p.leader >= 0}
    for idle in [x for x in b.fetchers if x not in leaders]:
        del b.fetchers[idle]
    for leader in sorted(leaders):
        f = b.fetchers.setdefault(leader, Fetcher(leader))
        if not f.in_flight:
            send_fetch(b, now_ms, f)


def send_fetch(b: BrokerState, now_ms: int, f: Fetcher) -> None:
    if b.broker_epoch < 0:
        return
    # what to ask for changes only with what the broker counts as a change (a log's end or
    # epochs, a partition's leader or role, a partition added or deleted) or its epoch
    at = b.read_version()
    fresh = f.parts_at != at
    if fresh:
        f.parts, f.parts_at = _followed(b, f.leader), at
    parts = f.parts
    if not parts:
        f.in_flight = False
        return
    if len(parts) > 1 and (b.config.replica_fetch_max_bytes < REPLICA_FETCH_MAX_BYTES
                           or b.config.replica_fetch_response_max_bytes < REPLICA_FETCH_RESPONSE_MAX_BYTES):
        # a limited response: each fetch starts at the next partition, so none starves
        # (Kafka's fetcher moves a partition to the end of its order once fetched)
        k = f.rounds % len(parts)
        f.rounds += 1
        parts = parts[k:] + parts[:k]
    f.correlation_id = b.corr()
    f.in_flight = True
    f.backing_off = False
    if fresh:  # else what the last request asked, which asked for the same
        f.asked = {fp.tp: (fp.current_leader_epoch, fp.fetch_offset) for fp in parts}
    b.send(f.leader, FetchRequest(f.correlation_id, b.node_id, b.broker_epoch,
                                  b.config.replica_fetch_wait_max_ms, 0, tuple(parts),
                                  b.config.replica_fetch_response_max_bytes))
    timeout = b.config.replica_fetch_wait_max_ms + b.config.replica_fetch_timeout_ms
    b.set_timer(timeout, ("fetcher", f.leader, f.correlation_id))


def _followed(b: BrokerState, leader: int) -> list[FetchPartition]:
    """What a fetch from ``leader`` asks for: each partition followed from it, in order."""
    parts = []
    for tp in sorted(b.partitions):
        p = b.partitions[tp]
        if p.role is not Role.FOLLOWER or p.leader != leader:
            continue
        last_epoch = -1 if Bug.TRUNCATE_TO_HIGH_WATERMARK in b.bugs else p.log.latest_epoch
        parts.append(FetchPartition(tp, p.leader_epoch, p.log.log_end_offset, last_epoch,
                                    b.config.replica_fetch_max_bytes))
    return parts


def fetcher_timer(b: BrokerState, now_ms: int, leader: int, corr: int) -> None:
    f = b.fetchers.get(leader)
    if f is None or f.correlation_id != corr:
        return
    # either the request got no answer in time, or this is the backoff after errors
    if not f.backing_off:
        b.close_connection(leader)  # no answer in time: a new connection, as Kafka's NetworkClient does
    f.in_flight = False
    send_fetch(b, now_ms, f)


def fetcher_timer_is_moot(b: BrokerState, leader: int, corr: int) -> bool:
    f = b.fetchers.get(leader)
    return f is None or f.correlation_id != corr


def on_fetch_response(b: BrokerState, now_ms: int, src: int, resp: FetchResponse) -> None:
    f = b.fetchers.get(src)
    if f is None or not f.in_flight or f.correlation_id != resp.correlation_id:
        return  # late, duplicated or for a fetcher that moved on
    backoff = False
    for r in resp.partitions:
        p = b.partitions.get(r.tp)
        if p is None or p.role is not Role.FOLLOWER or p.leader != src:
            continue
        if f.asked.get(r.tp) != (p.leader_epoch, p.log.log_end_offset):
            # asked in an earlier leader epoch or from another log end (the partition
            # followed another leader meanwhile): the answer continues a log this replica
            # may no longer have
            mark("follower-stale-fetch-response")
            continue
        if not _apply_fetched(b, p, r):
            backoff = True
    if backoff:
        f.correlation_id = b.corr()
        f.backing_off = True
        b.set_timer(b.config.replica_fetch_backoff_ms, ("fetcher", f.leader, f.correlation_id))
    else:
        f.in_flight = False
        send_fetch(b, now_ms, f)


def _apply_fetched(b: BrokerState, p: Partition, r: FetchedPartition) -> bool:
    """Apply one partition of a fetch response; False asks the fetcher to back off."""
    log = p.log
    if r.error is Errors.OFFSET_OUT_OF_RANGE:
        before = log.log_end_offset
        if r.log_end_offset >= 0 and log.log_end_offset > r.log_end_offset:
            mark("follower-truncate-out-of-range")
            if r.log_end_offset < log.high_watermark:
                mark("follower-truncate-below-hw")
            log.truncate_to(r.log_end_offset)
        elif log.log_end_offset < r.log_start_offset:
            mark("follower-reset-to-log-start")
            log.truncate_fully_and_start_at(r.log_start_offset)
        else:
            return False
        b.event("truncate", key=p.tp.key, from_offset=before, to=log.log_end_offset, reason="out-of-range")
        return True
    if r.error is not Errors.NONE:
        return False
    if r.diverging_epoch is not None:
        before = log.log_end_offset
        p.truncate_on_divergence(*r.diverging_epoch)
        b.event("truncate", key=p.tp.key, from_offset=before, to=log.log_end_offset,
                reason="diverging-epoch", epoch=r.diverging_epoch[0])
        return True
    try:
        for batch in r.records:
            last = rec.last_offset_of(batch)
            if last < log.log_end_offset:
                continue  # already have it
            if rec.base_offset_of(batch) < log.log_end_offset:
                break  # overlaps what we have: not a continuation
            log.append_as_follower(batch)
    except StorageError:
        return False
    except (rec.CorruptRecordError, ValueError):
        return False  # a corrupt fetch is dropped and fetched again
    old_hw = log.high_watermark
    if r.high_watermark >= 0 and log.update_high_watermark(r.high_watermark):
        b.emit("hw-advance", {"key": p.tp.key, "from": old_hw, "to": log.high_watermark,
                              "leader_epoch": p.leader_epoch, "follower": True})
    if r.log_start_offset > log.log_start_offset:
        log.increment_log_start_offset(r.log_start_offset)  # bounded by our HW
    return True

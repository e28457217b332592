"""The leader side of replication: fetches served, the high watermark, ISR changes, offsets.

Rules (docs/explanation/protocol-notes.md section 1; :mod:`reference.partition` decides, this module acts):

* A replica fetch is validated for divergence (rule 1: the answer names the diverging epoch
  instead of records), fenced by leader epoch (rule 2), counts toward the high watermark
  only once validated (rule 3), and may propose an ISR expansion (rule 4), all when it
  arrives: a waiting fetch read again to be answered changes nothing of the follower's state.
* A consumer fetch reads below the high watermark, or below the last stable offset with
  read_committed, with the aborted transactions of the range (rule 6).
* A fetch with nothing to return waits in ``delayed_fetch`` up to its ``max_wait_ms`` (long
  polling); every append and every high-watermark advance wakes the fetches of the partition.
* When the high watermark advances: the purgatory's produces and markers complete, fetches
  wake, and the partition's coordinator (for an internal topic) hears of it, in that order.
* ISR changes go to the controller as AlterPartition (Kafka's AlterPartitionManager): one in
  flight a partition, asked again while unanswered (it may have been applied), as it was made
  (the broker epochs it named included), dropped only when the controller says it was not.
* ListOffsets and OffsetForLeaderEpoch answer from the leader's log.
"""

from __future__ import annotations

from reference import records as rec
from reference.broker_state import BrokerState, DelayedFetch
from reference.bugs import Bug
from reference.errors import Errors
from reference.marks import mark
from reference.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    TopicPartition,
)
from reference.partition import Partition

LIST_OFFSETS_MAX_TIMESTAMP = -3  # KIP-734


# ---------------------------------------------------------------- the high watermark


def maybe_advance_hw(b: BrokerState, now_ms: int, p: Partition) -> None:
    old = p.log.high_watermark
    if p.maybe_advance_high_watermark():
        b.emit("hw-advance", {"key": p.tp.key, "from": old, "to": p.log.high_watermark,
                              "leader_epoch": p.leader_epoch})
        complete_produces(b, p)
        wake_fetches(b, now_ms, p.tp)
        coordinator = b.coordinators.get(p.tp.topic)
        if coordinator is not None:
            coordinator.on_high_watermark(now_ms, p.tp.partition)


def complete_produces(b: BrokerState, p: Partition) -> None:
    """The produces and markers the high watermark now covers (the purgatory)."""
    if p.tp in b.purgatory:
        b.purgatory.complete(p.tp, p.log.high_watermark, len(p.isr) >= p.effective_min_isr)


# ---------------------------------------------------------------- fetches served


def on_fetch(b: BrokerState, now_ms: int, src: int, req: FetchRequest) -> None:
    before = b.changes[0]
    results, has_data = _read_fetch(b, now_ms, req)
    if has_data or req.max_wait_ms <= 0:
        b.send(src, FetchResponse(req.correlation_id, tuple(results)))
        return
    # what it read is what reading again finds until the broker counts a change (a log's
    # batches, ends, HW or epochs, a partition's state), unless one came during this read
    read = tuple(results) if b.changes[0] == before else None
    b.delayed_fetch.append(DelayedFetch(src, req, now_ms + req.max_wait_ms,
                                        frozenset(fp.tp for fp in req.partitions),
                                        read, b.read_version()))
    b.set_timer(req.max_wait_ms, "fetch-expiry")


def _read_fetch(b: BrokerState, now_ms: int, req: FetchRequest,
                arrived: bool = True) -> tuple[list[FetchedPartition], bool]:
    """Each partition read in the request's order within what is left of the response's
    ``max_bytes``; as Kafka's ReplicaManager.readFromLog, only the first partition that returns
    records may exceed its limit (by its first batch), so that a fetch always makes progress.

    A follower's position counts (and may expand the ISR) only when its fetch arrives, not
    when a waiting fetch is read again to answer it (Kafka's ``updateFetchState =
    !readFromPurgatory``): by then the follower may have crashed and fetched again as a new
    incarnation, and the old request would put its lost log back in the leader's view."""
    results = []
    has_data = False
    left = req.max_bytes
    min_one = True
    for fp in req.partitions:
        r = _read_partition(b, now_ms, req, fp, left, min_one, arrived)
        if r.records:
            size = sum(len(x) for x in r.records)
            left = max(0, left - size)
            min_one = False
        if r.records or r.error is not Errors.NONE or r.diverging_epoch is not None:
            has_data = True
        results.append(r)
    return results, has_data


def _read_partition(b: BrokerState, now_ms: int, req: FetchRequest, fp: FetchPartition,
                    left: int = 0x7FFFFFFF, min_one: bool = True, arrived: bool = True) -> FetchedPartition:
    p = b.partitions.get(fp.tp)
    if b.broker_epoch < 0 or p is None or not p.is_leader:
        return FetchedPartition(fp.tp, b.not_led_here(fp.tp))
    log = p.log
    follower = req.replica_id >= 0
    no_epoch_check = follower and Bug.HW_WITHOUT_EPOCH_CHECK in b.bugs
    if no_epoch_check and arrived:
        # the bug: the position counts toward the HW before (and whatever) the checks say
        p.update_follower(req.replica_id, req.replica_epoch, fp.fetch_offset, now_ms)
        maybe_advance_hw(b, now_ms, p)
    if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
        fenced = p.check_epoch(fp.current_leader_epoch)
        assert fenced is not None  # an epoch of 0 or more that is not the leader's
        return FetchedPartition(fp.tp, Errors[fenced])
    if follower and not p.matches_latest_epoch(fp.fetch_offset, fp.last_fetched_epoch):
        diverging = p.divergence(fp.fetch_offset, fp.last_fetched_epoch)
        if diverging is not None:
            return FetchedPartition(fp.tp, Errors.NONE, log.high_watermark,
                                    log.log_start_offset, (), diverging, log.log_end_offset)
    if fp.fetch_offset > log.log_end_offset or fp.fetch_offset < log.log_start_offset:
        mark("fetch-out-of-range")
        return FetchedPartition(fp.tp, Errors.OFFSET_OUT_OF_RANGE, log.high_watermark,
                                log.log_start_offset, log_end_offset=log.log_end_offset)
    if follower:
        if arrived:
            if not no_epoch_check:
                p.update_follower(req.replica_id, req.replica_epoch, fp.fetch_offset, now_ms)
                maybe_advance_hw(b, now_ms, p)
            expanded = p.isr_to_expand(req.replica_id)
            if expanded is not None:
                mark("isr-expand")
                propose_isr(b, p, expanded)
        batches = log.read(fp.fetch_offset, min(fp.max_bytes, left), log.log_end_offset, min_one)
        return FetchedPartition(fp.tp, Errors.NONE, log.high_watermark, log.log_start_offset,
                                tuple(batches), None, log.log_end_offset)
    lso = p.last_stable_offset()
    if req.isolation_level == 1:
        batches = log.read(fp.fetch_offset, min(fp.max_bytes, left), lso, min_one)
        end = rec.last_offset_of(batches[-1]) + 1 if batches else fp.fetch_offset
        aborted = tuple(log.producer_state.aborted_between(fp.fetch_offset, end))
    else:
        batches = log.read(fp.fetch_offset, min(fp.max_bytes, left), log.high_watermark, min_one)
        aborted = ()
    return FetchedPartition(fp.tp, Errors.NONE, log.high_watermark, log.log_start_offset,
                            tuple(batches), None, -1, lso, aborted)


def wake_fetches(b: BrokerState, now_ms: int, tp: TopicPartition) -> None:
    """Answer the waiting fetches of ``tp`` that now have something to return."""
    if not b.delayed_fetch:
        return
    waiting = []
    for d in b.delayed_fetch:
        if tp in d.tps:
            results, has_data = _read_fetch(b, now_ms, d.request, arrived=False)
            if has_data:
                b.send(d.src, FetchResponse(d.request.correlation_id, tuple(results)))
                continue
        waiting.append(d)
    b.delayed_fetch = waiting


def expire_fetches(b: BrokerState, now_ms: int) -> None:
    waiting = []
    for d in b.delayed_fetch:
        if d.deadline_ms <= now_ms:
            if d.read is not None and d.read_at == b.read_version():
                read = d.read  # nothing changed since it arrived: the same answer
            else:
                read = tuple(_read_fetch(b, now_ms, d.request, arrived=False)[0])
            b.send(d.src, FetchResponse(d.request.correlation_id, read))
        else:
            waiting.append(d)
    b.delayed_fetch = waiting


# ---------------------------------------------------------------- ISR changes


def propose_isr(b: BrokerState, p: Partition, new_isr: frozenset[int]) -> None:
    """Ask the controller for ``new_isr``, each member named with the broker epoch of the
    fetches the leader judged it by (KIP-841; Kafka's Partition.addBrokerEpochToIsr)."""
    members = []
    for r in sorted(new_isr):
        if r == b.node_id:
            members.append((r, b.broker_epoch))
        else:
            f = p.followers.get(r)
            members.append((r, f.broker_epoch if f is not None else -1))
    p.pending_isr = new_isr
    p.pending_members = tuple(members)
    _send_alter(b, p)


def _send_alter(b: BrokerState, p: Partition) -> None:
    corr = b.corr()
    b.alter_in_flight[corr] = p.tp
    b.send(b.controller_id, AlterPartitionRequest(
        corr, b.node_id, b.broker_epoch, p.tp, p.leader_epoch, p.partition_epoch, p.pending_members))
    b.set_timer(b.config.alter_partition_timeout_ms, ("alter-timeout", corr))


def on_alter_partition_response(b: BrokerState, now_ms: int, msg: AlterPartitionResponse) -> None:
    tp = b.alter_in_flight.pop(msg.correlation_id, None)
    p = b.partitions.get(msg.tp)
    if tp is None or p is None:
        return
    if msg.error is Errors.NONE and msg.state is not None:
        old = p.isr
        p.pending_isr = None
        p.apply_state(msg.state, now_ms)
        kind = "isr-expand" if len(p.isr) > len(old) else "isr-shrink"
        b.event(kind, key=tp.key, isr=sorted(p.isr), partition_epoch=p.partition_epoch)
        if p.is_leader:
            maybe_advance_hw(b, now_ms, p)
    elif msg.error in (Errors.INELIGIBLE_REPLICA, Errors.OPERATION_NOT_ATTEMPTED):
        # the controller says its partition epoch is ours and the change was not applied:
        # the committed ISR holds (Kafka's Partition.handleAlterPartitionError)
        p.pending_isr = None
    # any other refusal: the change stays pending until the next metadata image settles it


def alter_timed_out(b: BrokerState, corr: int) -> None:
    """No answer: the change may or may not have been applied, so it stays pending (the HW
    keeps counting the larger ISR) and is asked again, as Kafka's AlterPartitionManager
    retries; dropping it let a leader that missed the controller's "yes" count a smaller ISR
    than the controller's."""
    tp = b.alter_in_flight.pop(corr, None)
    if tp is not None:
        b.close_connection(b.controller_id)  # a new connection for the retry
    p = b.partitions.get(tp) if tp is not None else None
    if p is not None and p.is_leader and p.pending_isr is not None:
        # the very request again, broker epochs and all (Kafka's AlterPartitionManager resends
        # the submitted item): re-reading the followers' epochs now would vouch for whatever
        # incarnation fetched last; a member that restarted meanwhile (with its unflushed tail
        # lost) was judged in sync only in its old epoch, and the controller must refuse it
        _send_alter(b, p)


def check_isr(b: BrokerState, now_ms: int) -> None:
    """Propose to shrink the ISR of each partition led here by the followers that lag."""
    if b.broker_epoch < 0:
        return
    for p in b.partitions.values():
        if p.is_leader:
            shrunk = p.isr_to_shrink(now_ms, b.config.replica_lag_time_max_ms)
            if shrunk is not None:
                mark("isr-shrink")
                if len(shrunk) < p.effective_min_isr:
                    mark("isr-shrink-below-min-isr")
                propose_isr(b, p, shrunk)


# ---------------------------------------------------------------- offsets


def on_list_offsets(b: BrokerState, src: int, req: ListOffsetsRequest) -> None:
    p, error = b.leader_for(req.tp, req.current_leader_epoch)
    if p is None:
        b.send(src, ListOffsetsResponse(req.correlation_id, req.tp, error))
        return
    if req.timestamp >= 0 or req.timestamp == LIST_OFFSETS_MAX_TIMESTAMP:
        # a lookup answers only what a consumer of that isolation level may read, and
        # (offset -1, timestamp -1, epoch -1) when nothing qualifies, as Kafka's
        # Partition.fetchOffsetForTimestamp
        upper = p.last_stable_offset() if req.isolation_level == 1 else p.log.high_watermark
        found = (p.log.offset_of_max_timestamp(upper) if req.timestamp == LIST_OFFSETS_MAX_TIMESTAMP
                 else p.log.offset_for_timestamp(req.timestamp, upper))
        offset, ts, epoch = found if found is not None else (-1, -1, -1)
        b.send(src, ListOffsetsResponse(req.correlation_id, req.tp, Errors.NONE, offset, epoch, ts))
        return
    if req.timestamp == -2:
        offset = p.log.log_start_offset
    elif not p.hw_reached_epoch_start():
        # rule 3: a new leader's HW may lag the true HW; do not answer with it (KIP-207)
        b.send(src, ListOffsetsResponse(req.correlation_id, req.tp, Errors.OFFSET_NOT_AVAILABLE))
        return
    elif req.isolation_level == 1:
        offset = p.last_stable_offset()
    else:
        offset = p.log.high_watermark
    b.send(src, ListOffsetsResponse(req.correlation_id, req.tp, Errors.NONE, offset, p.leader_epoch))


def on_offset_for_leader_epoch(b: BrokerState, src: int, req: OffsetForLeaderEpochRequest) -> None:
    p, error = b.leader_for(req.tp, req.current_leader_epoch)
    if p is None:
        b.send(src, OffsetForLeaderEpochResponse(req.correlation_id, req.tp, error))
        return
    epoch, end = epoch_end_offset(p, req.leader_epoch)
    b.send(src, OffsetForLeaderEpochResponse(req.correlation_id, req.tp, Errors.NONE, epoch, end))


def epoch_end_offset(p: Partition, leader_epoch: int) -> tuple[int, int]:
    """The OffsetForLeaderEpoch answer as Kafka's LeaderEpochFileCache.endOffsetFor gives
    it: an epoch above the latest is unknown (-1, -1); one below the first ends where the
    first begins, under the epoch asked. (Followers use the log's own lookup, through
    the fetch's diverging epoch, which ends in the same truncation.)"""
    epochs = p.log.epochs
    if leader_epoch < 0 or not epochs or leader_epoch > epochs[-1][0]:
        return -1, -1
    if leader_epoch < epochs[0][0]:
        return leader_epoch, epochs[0][1]
    return p.log.end_offset_for_epoch(leader_epoch)

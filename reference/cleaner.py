"""What moves a log's start or removes records: DeleteRecords, compaction and retention.

* DeleteRecords (leader only) moves the log start offset up to the high watermark at most;
  followers follow it through their fetches (:mod:`reference.follower`).
* Every ``log_cleaner_backoff_ms`` each replica cleans its own logs: a compacted topic
  keeps the newest record of each key below the first unstable offset (an open
  transaction's records are never cleaned), removing tombstones after
  ``delete.retention.ms``; a topic with ``cleanup.policy=delete`` drops segments past its
  retention. A full or failing disk skips a round.
"""

from __future__ import annotations

from reference import log_cleaner
from reference.broker_state import BrokerState
from reference.errors import Errors
from reference.messages import DeleteRecordsRequest, DeleteRecordsResponse
from reference.storage import StorageError


def on_delete_records(b: BrokerState, src: int, req: DeleteRecordsRequest) -> None:
    p, error = b.leader_for(req.tp, -1)
    if p is None:
        b.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, error))
        return
    offset = p.log.high_watermark if req.offset == -1 else req.offset
    if offset < 0 or offset > p.log.high_watermark:
        b.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, Errors.OFFSET_OUT_OF_RANGE))
        return
    try:
        if p.log.increment_log_start_offset(offset):
            b.event("log-start-offset", key=req.tp.key, offset=p.log.log_start_offset, reason="delete-records")
    except StorageError:
        b.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, Errors.KAFKA_STORAGE_ERROR))
        return
    b.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, Errors.NONE, p.log.log_start_offset))


def run_cleaner(b: BrokerState, now_ms: int) -> None:
    """Compaction and retention on every replica (each replica cleans its own log)."""
    for tp in sorted(b.partitions):
        log = b.partitions[tp].log
        try:
            if log.config.compact:
                first = log.producer_state.first_unstable_offset(log.high_watermark)
                upper = log.high_watermark if first is None else min(first, log.high_watermark)
                result = log_cleaner.clean(log, now_ms, upper)
                if result is not None:
                    b.event("compaction", key=tp.key, first_offset=result.first_offset,
                            end_offset=result.end_offset, removed=result.records_removed,
                            tombstones_removed=result.tombstones_removed, aborted_removed=result.aborted_removed)
            if log.config.delete:
                before = log.log_start_offset
                if log.apply_retention(now_ms) > before:
                    b.event("log-start-offset", key=tp.key, offset=log.log_start_offset, reason="retention")
        except StorageError:
            continue  # a full or failing disk: try again at the next round

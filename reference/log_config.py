"""A log's configuration: Kafka's topic-level settings for segments, flushing, retention and
compaction, over the broker's defaults (:meth:`LogConfig.from_topic`)."""

from __future__ import annotations

from reference.frozen import frozen


@frozen
class LogConfig:
    segment_bytes: int = 1 << 20
    segment_ms: int | None = None  # roll a segment this long after its first batch's timestamp
    flush_messages: int | None = None  # Kafka's flush.messages; None = never (the default)
    cleanup_policy: str = "delete"  # "delete", "compact" or "compact,delete"
    retention_ms: int | None = None  # None: keep forever
    retention_bytes: int | None = None
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    delete_retention_ms: int = 86_400_000  # how long tombstones survive cleaning

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_topic(cls, base: LogConfig, configs: dict[str, str]) -> LogConfig:
        """Apply a topic's configs (Kafka's names) over the broker's defaults."""
        return cls(
            segment_bytes=int(configs.get("segment.bytes", base.segment_bytes)),
            segment_ms=_optional(configs, "segment.ms", base.segment_ms),
            flush_messages=base.flush_messages,
            cleanup_policy=configs.get("cleanup.policy", base.cleanup_policy),
            retention_ms=_optional(configs, "retention.ms", base.retention_ms),
            retention_bytes=_optional(configs, "retention.bytes", base.retention_bytes),
            min_cleanable_dirty_ratio=float(configs.get("min.cleanable.dirty.ratio",
                                                        base.min_cleanable_dirty_ratio)),
            min_compaction_lag_ms=int(configs.get("min.compaction.lag.ms", base.min_compaction_lag_ms)),
            max_compaction_lag_ms=_optional(configs, "max.compaction.lag.ms", base.max_compaction_lag_ms),
            delete_retention_ms=int(configs.get("delete.retention.ms", base.delete_retention_ms)),
        )


def _optional(configs: dict[str, str], name: str, cur: int | None) -> int | None:
    """A topic's optional setting: the broker's (``cur``) when the topic has none, None when it
    says -1 or nothing."""
    v = configs.get(name)
    return cur if v is None else (None if v in ("-1", "") else type(cur or 0)(v))

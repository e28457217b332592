"""What the checks of one history work on and write to: the run's typed config, the anomalies
reported so far, and the history being judged.

:class:`RunConfig` is what the checker reads of run.json's ``config``; :class:`Result` the
anomalies reported so far (allowed or not); :class:`Judging` the history being judged (its
ops, analysis and what the checks hand on to later ones).

The checks of :data:`properties.check_table.CHECKS` run over one :class:`Judging`;
:mod:`properties.checker` builds it and turns its :class:`Result` into the verdict.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from properties.analysis import Analysis
from properties.compaction_checks import Compaction
from properties.cycles import Budget

MAX_REPORTED = 50  # anomalies listed per type; the count is always complete

DEFAULT_STALENESS_BOUND_MS = 30_000


@dataclass(slots=True)
class Result:
    anomalies: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    allowed_items: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    allowed: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, allowed: bool = False, **evidence: Any) -> None:
        """Record one anomaly; ``allowed`` marks an instance that is not a violation."""
        if allowed:
            self.allowed[kind] += 1
            if len(self.allowed_items[kind]) < MAX_REPORTED:
                self.allowed_items[kind].append(evidence)
            return
        self.counts[kind] += 1
        if len(self.anomalies[kind]) < MAX_REPORTED:
            self.anomalies[kind].append(evidence)


@dataclass(frozen=True)
class RunConfig:
    """What the checker reads of run.json's ``config`` (docs/reference/trace-format.md), typed;
    ``raw`` is the whole of it, for the checks that read more (the eos, groups and compaction
    settings, the final read)."""

    acks: str = "all"
    isolation_level: str | None = None  # read_uncommitted allows a read of one's own open writes
    subscribe: bool = False  # consumers subscribe (``sub_via``): rebalances move partitions
    compacted: bool = False
    eos: bool = False
    groups: bool = False
    stalled: bool = False
    staleness_bound_ms: int = DEFAULT_STALENESS_BOUND_MS
    ww_deps: bool = True
    raw: dict = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, config: dict) -> RunConfig:
        final = config.get("final_read") or {}
        return cls(acks=str(config.get("acks", "all")), isolation_level=config.get("isolation_level"),
                   subscribe="subscribe" in (config.get("sub_via") or []),
                   compacted=bool(config.get("compacted")), eos=bool(config.get("eos")),
                   groups=bool(config.get("groups")), stalled=bool(config.get("stalled")),
                   staleness_bound_ms=int(config.get("staleness_bound_ms") or final.get("staleness_bound_ms")
                                          or DEFAULT_STALENESS_BOUND_MS),
                   ww_deps=bool(config.get("ww_deps", True)), raw=config)

    @property
    def weak_acks(self) -> bool:
        """acks 0 or 1: an acknowledged write may be lost with its leader."""
        return self.acks in ("0", "1")

    def holds(self, when: str) -> bool:
        """Whether condition ``when`` of an :class:`Allowance` holds: ``always`` or a flag."""
        return when == "always" or bool(getattr(self, when))



@dataclass
class Judging:
    """One history being judged: its config, ops, analysis, the result so far, and what the
    checks hand on to later ones (the unread writes, the cycle search's and the
    linearizability check's statistics)."""

    rc: RunConfig
    ops: Iterable[dict]
    compiled: list
    a: Analysis
    r: Result
    budget: Budget
    linearizable: bool
    compaction: Compaction | None = None  # what the cleaner may remove, on a compacted topic
    unread: list = field(default_factory=list)
    cycle_stats: dict = field(default_factory=dict)
    lin_unknown: str | None = None
    lin_stats: dict | None = None
    faults: frozenset = frozenset()  # the nemesis ops' kinds (f)


"""``kafkacheck hunt`` without ``--bug``: the swarm hunt for bugs nobody planted.

Swarm seeds (each draws its own run: :mod:`kafkacheck.swarm`) run until the time limit or
``--runs``, ``--jobs`` at a time or as Spark tasks (:mod:`kafkacheck.hunt_tasks`), the next
seed chosen by :class:`Steering`. The first finding ends the hunt; it is shrunk (the same seed
with half the ops, while it stays invalid) and saved as a run directory
(:func:`kafkacheck.hunt.save_run`), and the coverage marks the runs reached are printed.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafkacheck.hunt import save_run
from kafkacheck.hunt_tasks import Tasks, _where

DEFAULT_SWARM_TIME_S = 120.0  # the swarm hunt (no --bug): how long it hunts


@dataclass
class SwarmOutcome:
    with_switch: str | None
    runs: int = 0
    seconds: float = 0.0
    found: list[tuple[int, list[str], str]] = field(default_factory=list)  # seed, anomalies, drawn
    mark_runs: dict[str, int] = field(default_factory=dict)  # mark -> runs that reached it
    mark_counts: dict[str, int] = field(default_factory=dict)  # mark -> times reached in all
    check_runs: dict[str, int] = field(default_factory=dict)  # check -> runs whose history exercised it
    by_workload: dict[str, int] = field(default_factory=dict)
    stopped_by: str = "time limit"
    unfinished: bool = False  # --runs given and the time limit came first
    ops: int = 0
    shrunk_ops: int | None = None
    run_dir: str | None = None  # the finding's run, saved (kafkacheck run --replay DIR)


def _swarm_run(job: tuple[int, int, str | None]) -> tuple[int, bool | str, list[str], dict[str, int], str, str,
                                                        list[str]]:
    """Draw and run swarm seed ``seed``; (seed, valid, anomaly types, marks, workload, drawn,
    the checks whose situation the run's history shows: :mod:`properties.exercised`)."""
    from dataclasses import replace

    from kafkacheck.judge import judge_record as judge
    from kafkacheck.runner import simulate
    from kafkacheck.swarm import describe, draw
    from properties.exercised import exercised

    seed, ops, bug = job
    options = draw(seed, ops)
    if bug:
        options = replace(options, bugs=[bug])
    outcome = simulate(options, None)
    record = outcome.record()
    r = judge(record)
    put_to_work = sorted(k for k, v in exercised(record.ops, record.meta["config"]).items() if v)
    return (seed, r["valid"], r["anomaly_types"], outcome.stats["marks"], options.workload, describe(options),
            put_to_work)


class Steering:
    """Which seed to run next: first the seeds of the covering array (:mod:`kafkacheck.covering`:
    every pair of the swarm's choices within a few dozen runs), then, among the next few unrun
    seeds, the one whose drawn choices (workload, faults, aimed strategies, timings...) have
    so far led to rarely reached marks. The seed alone still reproduces each run; only the
    order is steered. A quarter of the picks ignore the scores (exploration), from the hunt's
    own seeded RNG."""

    CANDIDATES = 6

    def __init__(self, ops: int, explore_seed: int = 0) -> None:
        import random
        from collections import deque

        from kafkacheck.covering import COVERING_SEEDS
        from kafkacheck.swarm import draw, features

        self._draw, self._features = draw, features
        self.ops = ops
        self.rng = random.Random(explore_seed)
        # first the covering array's seeds (kafkacheck.covering), in its order, then steered
        self.planned = deque(COVERING_SEEDS)
        self._planned = set(self.planned)
        self.pool: list[int] = []
        self.next_seed = 0
        self.mark_runs: dict[str, int] = {}
        self.score: dict[str, tuple[float, int]] = {}  # feature -> (sum of novelty, runs)
        self.drawn: dict[int, list[str]] = {}

    def pick(self) -> int:
        if self.planned:
            seed = self.planned.popleft()
            self.drawn[seed] = self._features(self._draw(seed, self.ops))
            return seed
        while len(self.pool) < self.CANDIDATES:
            if self.next_seed not in self._planned:
                self.pool.append(self.next_seed)
                self.drawn[self.next_seed] = self._features(self._draw(self.next_seed, self.ops))
            self.next_seed += 1
        if not self.mark_runs or self.rng.random() < 0.25:
            seed = self.pool[0]
        else:
            seed = max(self.pool, key=lambda s: (self._value(self.drawn[s]), -s))
        self.pool.remove(seed)
        return seed

    def _value(self, feats: list[str]) -> float:
        known = [self.score[f] for f in feats if f in self.score]
        best = max((total / n for total, n in self.score.values()), default=1.0)
        values = [total / n for total, n in known] + [best] * (len(feats) - len(known))
        return sum(values) / len(values) if values else 0.0

    def learn(self, seed: int, marks: dict[str, int]) -> None:
        novelty = sum(1.0 / (1 + self.mark_runs.get(m, 0)) for m in marks)
        for m in marks:
            self.mark_runs[m] = self.mark_runs.get(m, 0) + 1
        for f in self.drawn.pop(seed, []):
            total, n = self.score.get(f, (0.0, 0))
            self.score[f] = (total + novelty, n + 1)


def swarm(time_limit: float, runs: int | None, jobs: int | None, with_switch: str | None = None,
          ops: int | None = None, log=print, shrink: bool = True, out_dir: Path | None = None,
          spark=None) -> SwarmOutcome:
    """Swarm seeds until the time limit (or ``runs`` runs): stop at the first finding, saved
    with ``out_dir`` as a run directory there. ``spark``: the runs as Spark tasks, steered as
    the local ones are (each result as it comes, whatever its order)."""
    from kafkacheck.swarm import DEFAULT_OPS

    ops = ops or DEFAULT_OPS
    out = SwarmOutcome(with_switch, ops=ops)
    steering = Steering(ops)
    start = time.monotonic()
    started = 0
    with Tasks(jobs, spark) as pool:
        jobs = pool.slots
        pending: dict[int, object] = {}
        while True:
            while (len(pending) < jobs and not out.found and (runs is None or started < runs)
                   and time.monotonic() - start < time_limit):
                seed = steering.pick()
                pending[seed] = pool.submit(_swarm_run, (seed, ops, with_switch))
                started += 1
            if not pending:
                break
            done = [s for s, p in pending.items() if p.ready()]
            if not done:
                if out.found:
                    break  # the first finding ends the hunt; runs under way are dropped
                if time.monotonic() - start > time_limit:
                    if runs is not None:
                        out.stopped_by = f"time limit, after {out.runs} of {runs} runs"
                        out.unfinished = True
                    break
                pool.wait(0.05)
                continue
            for s in sorted(done):
                h = pending.pop(s)
                seed, valid, kinds, marks, workload, drawn, checks = h.get()
                out.runs += 1
                for c in checks:
                    out.check_runs[c] = out.check_runs.get(c, 0) + 1
                out.by_workload[workload] = out.by_workload.get(workload, 0) + 1
                for m, n in marks.items():
                    out.mark_runs[m] = out.mark_runs.get(m, 0) + 1
                    out.mark_counts[m] = out.mark_counts.get(m, 0) + n
                steering.learn(seed, marks)
                verdict = valid if valid is not False else "INVALID " + ",".join(kinds)
                log(f"  swarm seed {seed}: {verdict} ({time.monotonic() - start:.1f} s{_where(h)}; {drawn})")
                if valid is False:
                    out.found.append((seed, kinds, drawn))
    out.seconds = time.monotonic() - start
    if runs is not None and out.runs >= runs and not out.found:
        out.stopped_by = f"{runs} runs"
    if out.found and shrink:
        seed = out.found[0][0]
        o = ops
        while o // 2 >= 100:
            _s, valid, kinds, _m, _w, _d, _c = _swarm_run((seed, o // 2, with_switch))
            if valid is not False:
                break
            o //= 2
            log(f"  swarm seed {seed}: shrunk to {o} ops ({','.join(kinds)})")
        out.shrunk_ops = o
    if out.found and out_dir is not None:
        out.run_dir = str(save_run(swarm_options(out.found[0][0], out.shrunk_ops or ops, with_switch), out_dir))
    return out


def swarm_command(seed: int, ops: int, bug: str | None) -> str:
    from kafkacheck.reproduce import command_line

    return command_line(swarm_options(seed, ops, bug))


def swarm_options(seed: int, ops: int, bug: str | None) -> dict:
    """The options of ``kafkacheck run`` (run.json's) that make swarm seed ``seed``'s run."""
    from kafkacheck.swarm import DEFAULT_OPS

    options: dict = {"swarm": seed}
    if ops != DEFAULT_OPS:
        options["ops"] = ops
    if bug:
        options["bug"] = [bug]
    return options


def print_swarm(out: SwarmOutcome) -> None:
    """The finding (or that there was none) first, then the coverage marks reached."""
    from rich.table import Table

    from kafkacheck.console import stdout_console
    from reference.marks import MARKS

    console = stdout_console()
    engine = f"the engine with {out.with_switch} on" if out.with_switch else "the engine"
    if out.found:
        seed, kinds, drawn = out.found[0]
        print(f"FOUND on {engine} after {out.runs} runs ({out.seconds:.1f} s): swarm seed {seed}: "
              f"{', '.join(kinds)}")
        print(f"  drawn: {drawn}")
        print(f"  reproduce with: {swarm_command(seed, out.shrunk_ops or out.ops, out.with_switch)}")
        if out.run_dir:
            print(f"  saved: kafkacheck run --replay {out.run_dir} runs it again, byte for byte")
    else:
        print(f"nothing found on {engine} in {out.runs} swarm runs (seeds drawn by the steering; "
              f"{out.seconds:.0f} s, stopped by the {out.stopped_by})")
    sys.stdout.flush()
    t = Table(title=f"coverage marks reached in {out.runs} swarm runs")
    t.add_column("mark")
    t.add_column("runs", justify="right")
    t.add_column("times", justify="right")
    for m in MARKS:
        if m in out.mark_runs:
            t.add_row(m, str(out.mark_runs[m]), str(out.mark_counts[m]))
    console.print(t)
    unreached = [m for m in MARKS if m not in out.mark_runs]
    print(f"marks reached: {len(MARKS) - len(unreached)} of {len(MARKS)}")
    if unreached:
        print("never reached: " + ", ".join(unreached))
    print_checks(out)
    print("runs by workload: " + ", ".join(f"{w} {n}" for w, n in sorted(out.by_workload.items())))


def print_checks(out: SwarmOutcome) -> None:
    """How many runs exercised each check of the checker's table (its situation arose:
    :mod:`properties.exercised`), and the checks none did, as the marks."""
    from properties.exercised import NOT_IN_HUNTS, SITUATIONS

    line = ", ".join(f"{c} {out.check_runs[c]}" for c in SITUATIONS if c in out.check_runs)
    print(f"checks exercised: {len(out.check_runs)} of {len(SITUATIONS)} ({line})")
    never = [f"{c} ({why})" for c, (why, _t) in SITUATIONS.items() if c not in out.check_runs]
    if never:
        print("never exercised: " + "; ".join(never))
    print("not run by hunts: " + ", ".join(NOT_IN_HUNTS) + " (kafkacheck check --lin)")

"""``kafkacheck corpus``: many simulated runs (or existing run directories) as a Parquet corpus.

A plan is a list of :class:`RunSpec` (workload, fault mix, acks, replication factor, bug
switch, seed), drawn at random from the options given or as their full grid; the run id is a
function of the spec, so a second invocation with the same options skips the runs the corpus
already holds (resume). Each run is simulated in a scratch directory, judged by the history
checker (its verdict goes to the ``verdicts`` table) and flattened into the tables of
:mod:`traces.parquet`, about ``runs_per_file`` runs to a file.

Engines: ``local`` (``--jobs`` processes on this machine; the parent writes the files) and
``spark`` (the batches of the plan become Spark tasks; each task simulates its runs and writes
its own part files, so the output directory must be one every executor can write to).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fault_injection.nemesis import offline_conflict
from kafkacheck.judge import judge_record as judge
from kafkacheck.workloads import IDEMPOTENT_WORKLOADS
from traces.parquet import (
    CorpusError,
    RunRecord,
    existing_runs,
    load_run_dir,
    next_part_number,
    open_corpus,
    run_rows,
    write_runs,
)


@dataclass(frozen=True)
class RunSpec:
    seed: int
    workload: str
    faults: tuple[str, ...]
    acks: str
    replication_factor: int
    bug: str | None
    ops: int
    clients: int = 5

    @property
    def run_id(self) -> str:
        mix = "+".join(self.faults) or "nofault"
        return (f"{self.workload}-{self.bug or 'correct'}-{mix}-acks{self.acks}"
                f"-rf{self.replication_factor}-ops{self.ops}-s{self.seed}")


def _normalise(spec: RunSpec) -> RunSpec:
    # idempotent and transactional producers require acks=all (Kafka refuses anything else)
    if spec.workload in IDEMPOTENT_WORKLOADS and spec.acks != "all":
        return replace(spec, acks="all")
    return spec


def plan(runs: int, workloads: list[str], faults: list[str], acks: list[str], rfs: list[int],
         bugs: list[str], ops: int, grid: bool, plan_seed: int = 0, max_faults: int = 2) -> list[RunSpec]:
    """``runs`` distinct specs. A random sample draws each dimension uniformly (a fault mix is
    1 to ``max_faults`` distinct faults, or none when ``none`` is listed; the bug is one of the
    switches or none); the grid walks every combination (single faults) for seed 0, then seed 1..."""
    bug_choices: list[str | None] = [None, *bugs]
    plain = [f for f in faults if f != "none"]
    if grid:
        mixes: list[tuple[str, ...]] = [()] if "none" in faults else []
        mixes += [(f,) for f in plain]
        combos = list(itertools.product(workloads, mixes, acks, rfs, bug_choices))
        out: dict[str, RunSpec] = {}
        for k in itertools.count():
            if len(out) >= runs:
                break
            w, mix, a, rf, bug = combos[k % len(combos)]
            s = _normalise(RunSpec(k // len(combos), w, mix, a, rf, bug, ops))
            out.setdefault(s.run_id, s)
            if k > 50 * runs + len(combos):
                break
        return list(out.values())[:runs]
    rng = random.Random(plan_seed)
    out = {}
    seed = 0
    while len(out) < runs:
        w = rng.choice(workloads)
        sizes = ([0] if "none" in faults or not plain else []) + list(range(1, min(max_faults, len(plain)) + 1))
        n = rng.choice(sizes)
        mix = tuple(sorted(rng.sample(plain, n)))
        s = _normalise(RunSpec(seed, w, mix, rng.choice(acks), rng.choice(rfs), rng.choice(bug_choices), ops))
        seed += 1
        if offline_conflict(list(mix)) is None:  # (offline-partition never goes with a power loss)
            out.setdefault(s.run_id, s)
    return list(out.values())


# ------------------------------------------------------------------ one run


def simulate_run(spec: RunSpec) -> RunRecord:
    """Simulate and judge one run; its record (run.json with the corpus's run id)."""
    from kafkacheck.runner import RunOptions, simulate

    rf = spec.replication_factor
    options = RunOptions(seed=spec.seed, ops=spec.ops, workload=spec.workload, faults=list(spec.faults),
                         acks=spec.acks, replication_factor=rf, min_insync_replicas=max(1, min(2, rf - 1)),
                         bugs=[spec.bug] if spec.bug else [], clients=spec.clients)
    record = simulate(options, None).record()
    record.meta["run_id"] = spec.run_id
    record.meta["corpus_spec"] = asdict(spec)
    record.results = judge(record)
    return record


def _one(spec: RunSpec) -> tuple[str, dict | None, str | None]:
    try:
        return spec.run_id, run_rows(simulate_run(spec)), None
    except Exception:  # a crashing run is reported, the others go on
        return spec.run_id, None, traceback.format_exc(limit=6)


def write_batch(corpus: str, number: int, specs: list[RunSpec]) -> tuple[int, list[tuple[str, str]]]:
    """A Spark task: simulate ``specs`` and write their part files. (runs written, failures)."""
    rows, failures = [], []
    for spec in specs:
        run_id, r, err = _one(spec)
        if r is None:
            failures.append((run_id, err or ""))
        else:
            rows.append(r)
    if rows:
        write_runs(Path(corpus), number, rows)
    return len(rows), failures


# ------------------------------------------------------------------ engines


class _Batches:
    """Runs' rows gathered into part files of ``size`` runs, numbered after the corpus's last."""

    def __init__(self, corpus: Path, size: int) -> None:
        self.corpus, self.size = corpus, size
        self.number = next_part_number(corpus)
        self.rows: list[dict] = []
        self.written = 0

    def add(self, rows: dict) -> None:
        self.rows.append(rows)
        if len(self.rows) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            write_runs(self.corpus, self.number, self.rows)
            self.number += 1
            self.written += len(self.rows)
            self.rows = []


@dataclass
class CorpusOutcome:
    written: int
    skipped: int
    failures: list[tuple[str, str]]
    seconds: float
    total_runs: int


def generate_local(corpus: Path, specs: list[RunSpec], jobs: int, runs_per_file: int,
                   progress: Callable[[int, int, str], None] | None = None) -> CorpusOutcome:
    start = time.monotonic()
    have = open_corpus(corpus)
    todo = [s for s in specs if s.run_id not in have]
    batches = _Batches(corpus, runs_per_file)
    failures: list[tuple[str, str]] = []
    results: Iterable[tuple[str, dict | None, str | None]]
    pool = None
    if jobs > 1 and len(todo) > 1:
        pool = mp.get_context("fork").Pool(jobs)
        results = pool.imap_unordered(_one, todo, chunksize=1)
    else:
        results = map(_one, todo)
    try:
        for done, (run_id, rows, err) in enumerate(results, 1):
            if rows is None:
                failures.append((run_id, err or ""))
            else:
                batches.add(rows)
            if progress is not None:
                progress(done, len(todo), run_id)
    finally:
        batches.flush()  # the rest, and what finished before an interruption
        if pool is not None:
            pool.terminate()
            pool.join()
    return CorpusOutcome(batches.written, len(specs) - len(todo), failures, time.monotonic() - start,
                         len(existing_runs(corpus)))


def generate_spark(corpus: Path, specs: list[RunSpec], runs_per_file: int, master: str | None,
                   progress: Callable[[int, int, str], None] | None = None) -> CorpusOutcome:
    from spark_analysis.session import get_spark

    start = time.monotonic()
    have = open_corpus(corpus)
    todo = [s for s in specs if s.run_id not in have]
    if not todo:
        return CorpusOutcome(0, len(specs), [], time.monotonic() - start, len(have))
    first = next_part_number(corpus)
    batches = [(first + i, todo[j:j + runs_per_file]) for i, j in enumerate(range(0, len(todo), runs_per_file))]
    spark = get_spark(master=master, app_name="kafkacheck-corpus")
    sc = spark.sparkContext
    out = str(corpus.resolve())
    rdd = sc.parallelize(batches, len(batches)).map(lambda b: write_batch(out, b[0], b[1]))
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = rdd.collect()
        except Exception as e:  # reported below
            result["error"] = e

    sc.setJobGroup("kafkacheck-corpus", "simulate runs")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    tracker = sc.statusTracker()
    while t.is_alive():
        t.join(0.5)
        if progress is not None:
            done = sum(tracker.getStageInfo(s).numCompletedTasks
                       for j in tracker.getJobIdsForGroup("kafkacheck-corpus")
                       for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [])
                       if tracker.getStageInfo(s))
            progress(min(done * runs_per_file, len(todo)), len(todo), f"{done}/{len(batches)} Spark tasks")
    if "error" in result:
        raise CorpusError(f"the Spark job failed: {str(result['error']).splitlines()[0]}")
    written = sum(n for n, _ in result["value"])
    failures = [f for _, fs in result["value"] for f in fs]
    if progress is not None:
        progress(len(todo), len(todo), "done")
    return CorpusOutcome(written, len(specs) - len(todo), failures, time.monotonic() - start,
                         len(existing_runs(corpus)))


# ------------------------------------------------------------------ existing run directories


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories under ``paths`` (each a run directory or a folder of them), sorted."""
    out: list[Path] = []
    for p in paths:
        if not p.exists():
            raise CorpusError(f"{p}: no such file or directory")
        if (p / "run.json").exists() or (p / "history.jsonl").exists():
            out.append(p)
            continue
        found = sorted(d.parent for d in p.glob("*/history.jsonl"))
        if not found:
            raise CorpusError(f"{p}: neither a run directory nor a folder of run directories")
        out.extend(found)
    return out


def convert_runs(corpus: Path, paths: list[Path], runs_per_file: int,
                 progress: Callable[[int, int, str], None] | None = None) -> CorpusOutcome:
    """Run directories into the corpus; runs without results.json are judged first."""
    start = time.monotonic()
    dirs = find_run_dirs(paths)
    have = open_corpus(corpus)
    taken: set[str] = set()
    batches = _Batches(corpus, runs_per_file)
    skipped = 0
    for i, d in enumerate(dirs, 1):
        record = load_run_dir(d)
        run_id = str(record.meta.get("run_id") or d.name)
        if run_id in taken:  # two directories of one run id (kafkacheck run's ids omit faults and acks)
            run_id = f"{run_id}~{d.name}"
        taken.add(run_id)
        record.meta["run_id"] = run_id
        if run_id in have:
            skipped += 1
        else:
            if record.results is None:
                record.results = judge(record)
            batches.add(run_rows(record))
        if progress is not None:
            progress(i, len(dirs), str(d))
    batches.flush()
    return CorpusOutcome(batches.written, skipped, [], time.monotonic() - start, len(existing_runs(corpus)))


def write_manifest(corpus: Path, options: dict, outcome: CorpusOutcome) -> None:
    path = corpus / "corpus.json"
    history = []
    if path.exists():
        try:
            history = json.loads(path.read_text()).get("invocations", [])
        except ValueError:
            history = []
    history.append({"options": options, "written": outcome.written, "skipped": outcome.skipped,
                    "failed": [r for r, _ in outcome.failures], "seconds": round(outcome.seconds, 1)})
    path.write_text(json.dumps({"format": 1, "runs": outcome.total_runs, "invocations": history},
                               indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------ the commands

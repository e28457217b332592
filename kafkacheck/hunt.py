"""``kafkacheck hunt --bug``/``--all``: proof that the harness finds the bugs it claims to find.

For a bug switch, runs seeds 0, 1, ..., ``runs - 1`` of a scenario that exercises that part
of the engine (workload, length, faults; no seed is chosen by hand), ``--jobs`` at a time,
and stops at the first invalid verdict (reporting the lowest invalid seed among those
started). It then shrinks the reproduction: the same seed with half the ops, again and
again, while the verdict stays invalid (every run is deterministic, so the shrunk command
reproduces exactly). With no switch it runs ``runs`` runs of the same scenarios and must
find nothing.

The verdict depends on work only: a switch is "missed" when none of its ``runs`` seeds fails,
which is the same on any machine. The wall-clock limit is a safety net: when it stops a hunt
before its runs are done, the outcome is "unknown" (exit 2), never "missed" or "nothing".

With ``--spark MASTER`` the runs are Spark tasks (:mod:`kafkacheck.hunt_tasks`) and the
driver does the rest as the local hunt does, with the same loop: the same seeds in the same
order, the same first finding, shrinking and saving on the driver. A finding is saved as a
run directory (:func:`save_run`, as :mod:`kafkacheck.run` makes one). The swarm hunt (no
``--bug``) is :mod:`kafkacheck.swarm_hunt`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafkacheck.exits import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from kafkacheck.hunt_tasks import Tasks, _where, spark_session
from kafkacheck.workloads import WORKLOADS
from reference.bugs import BUGS, Bug

DEFAULT_RUNS = 60  # seeds a switch (and runs without one): the budget that decides
DEFAULT_TIME_LIMIT_S = 900.0  # wall seconds a switch: only a safety net (outcome "unknown")
# --machines: programs a machine runs (derandomized: the same programs every time, so this
# budget decides, as --runs does for seeds), and the wall-clock safety net of each machine
DEFAULT_MACHINE_PROGRAMS = 2000
DEFAULT_MACHINE_TIME_S = 1200.0  # the slowest, queue, runs about 7 programs a second


@dataclass(frozen=True)
class Scenario:
    workload: str = "queue"
    ops: int = 2000
    faults: tuple[str, ...] = ("partition", "kill", "pause", "disk")
    extra: tuple[str, ...] = ()
    # a z3 counterexample's shape instead of random faults (kafkacheck run --template), on a
    # cluster the size of the model (its replay's: one partition, min.insync.replicas 1)
    template: str | None = None
    brokers: int = 3
    group_protocol: str = "classic"  # the groups workloads' (consumer: KIP-848's)
    assignor: str = "range"
    partitions: int | None = None  # the topic's, when not 4


# the part of the engine each switch breaks, and a workload that leans on it
SCENARIOS: dict[str, Scenario] = {
    Bug.TRUNCATE_TO_HIGH_WATERMARK: Scenario(ops=3000),
    # the shapes of the model's counterexamples (kafkacheck run --template), which random
    # faults need 17 (hw-without-epoch-check) and 37 (unclean-election) seeds to stumble on
    Bug.HW_WITHOUT_EPOCH_CHECK: Scenario(ops=3000, faults=(), template="no-epoch-hw", brokers=2),
    # too precise a sequence for random faults (none found in 80 seeds): the model's shape
    Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW: Scenario(ops=3000, faults=(), template="kip279-hole", brokers=2),
    Bug.UNCLEAN_ELECTION: Scenario(ops=3000, faults=(), template="unclean", brokers=2),
    Bug.NO_SEQUENCE_CHECK: Scenario(workload="idempotent", ops=3000),
    Bug.ACK_BEFORE_ISR: Scenario(ops=2000),
    Bug.LSO_OFF_BY_ONE: Scenario(workload="txn", ops=1000),
    Bug.TXN_UNFENCED_REQUESTS: Scenario(workload="txn", ops=3000, faults=("straggle",)),
    Bug.GROUP_GENERATION_UNFENCED: Scenario(workload="groups", ops=2000),
    Bug.GROUP_UNLOAD_STRANDS_JOINS: Scenario(workload="groups", ops=2000),
    Bug.COMPACTION_DROPS_LATEST: Scenario(workload="compaction", ops=2000),
    # KAFKA-20734's window: a partition of one replica offline while transactions end
    Bug.TXN_MARKERS_SKIP_OFFLINE: Scenario(workload="txn", ops=1000, faults=("offline-partition",)),
    # KIP-848's consumer groups: the range assignor moves partitions at every membership
    # change, so a partition pending revocation is often given back to its member
    Bug.CONSUMER_GROUP_PARTITION_EPOCH_LOST: Scenario(workload="groups", ops=2000, group_protocol="consumer"),
    Bug.CONSUMER_GROUP_REJOIN_FENCED: Scenario(workload="groups", ops=2000, group_protocol="consumer",
                                               assignor="uniform"),
    # KIP-932's share groups
    Bug.SHARE_ACK_BEFORE_PERSIST: Scenario(workload="share", ops=1000, partitions=2),
    Bug.SHARE_ACK_ANY_HOLDER: Scenario(workload="share", ops=1000, partitions=2),
    Bug.SHARE_COUNT_NOT_INCREMENTED: Scenario(workload="share", ops=1000, partitions=2),
}
# without a switch: every workload of the registry, at its own length
NO_BUG_SCENARIOS = [Scenario(workload=name, ops=w.hunt_ops,
                             partitions=None if w.default_partitions == 4 else w.default_partitions)
                    for name, w in WORKLOADS.items()]


@dataclass
class Outcome:
    bug: str | None
    detected: bool = False
    seed: int | None = None
    anomalies: list[str] = field(default_factory=list)
    seconds: float = 0.0
    runs: int = 0
    runs_budget: int = 0
    timed_out: bool = False  # the wall-clock safety net stopped it before its runs were done
    shrunk_ops: int | None = None
    shrunk_client_ops: int | None = None
    command: str = ""
    run_dir: str | None = None  # the finding's run, saved (kafkacheck run --replay DIR)
    scenario: Scenario | None = None
    false_positives: list[tuple[str, int, list[str]]] = field(default_factory=list)
    machine: str | None = None  # the Hypothesis machine run too (--machines), and what it did
    machine_found: str | None = None
    machine_seconds: float = 0.0
    machine_programs: int = 0
    machine_programs_budget: int = 0
    machine_found_after: int | None = None  # programs up to the first finding
    machine_found_seconds: float | None = None
    machine_timed_out: bool = False  # the safety net stopped a machine before its programs
    machine_program_file: str | None = None  # the finding's program, saved for --replay
    machine_cut: list[str] = field(default_factory=list)  # machines the time limit stopped


def hunt_machine(out: Outcome, name: str, bugs: list[str], programs: int, time_limit: float,
                 log=print, out_dir: Path = Path("runs/hunt")) -> None:
    """Run Hypothesis state machine ``name`` for ``programs`` programs (derandomized: the same
    ones every time), stopping at the first finding, saved in ``out_dir``; ``time_limit`` is a
    safety net."""
    from kafkacheck.explore import explore, save

    who = out.bug or "no switch"
    log(f"  {who}: Hypothesis machine {name}, {programs} programs (at most {time_limit:g} s)")
    r = explore(name, bugs, examples=programs, time_limit=time_limit, derandomize=True, shrink=False)
    out.machine = (out.machine + ", " if out.machine else "") + name
    out.machine_seconds += r.seconds
    out.machine_programs += r.examples
    out.machine_programs_budget += programs
    if r.timed_out:
        out.machine_timed_out = True
        out.machine_cut.append(name)
        log(f"  {who}: machine {name}: the {time_limit:g} s time limit stopped it after {r.examples} "
            f"of {programs} programs")
    if r.found and not out.machine_found:
        out.machine_found = f"{name}: {r.found}"
        out.machine_found_after, out.machine_found_seconds = r.found_after, r.found_seconds
        log(f"  {who}: machine {name} found after {r.found_after} programs, {r.found_seconds:.1f} s: {r.found}")
        path = out_dir / f"hunt-{out.bug or 'no-switch'}-{name}.json"
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            save(path, name, bugs, r.steps)
            out.machine_program_file = str(path)
        except OSError as e:
            log(f"  could not save the program to {path}: {e.strerror or e}")


def _judge_run(job: tuple[str | None, Scenario, int, int]) -> tuple[int, bool | str, list[str], int]:
    """Run one seed in a scratch directory; (seed, valid, anomaly types, client ops)."""
    from kafkacheck.corpus import RunSpec, simulate_run

    bug, sc, seed, ops = job
    if sc.template is not None or sc.group_protocol != "classic" or sc.partitions is not None:
        return _judge_template_run(bug, sc, seed, ops)
    r = simulate_run(RunSpec(seed=seed, workload=sc.workload, faults=tuple(sc.faults), acks="all",
                             replication_factor=3, bug=bug, ops=ops)).results
    return seed, r["valid"], r["anomaly_types"], r["stats"]["client_ops"]


def _judge_template_run(bug: str | None, sc: Scenario, seed: int, ops: int) -> tuple[int, bool | str, list[str], int]:
    """A run of a scenario the corpus's run specs cannot say: a model template's shape, or a
    group protocol and assignor."""
    from fault_injection.model_shapes import seeded_template
    from kafkacheck.judge import judge_record as judge
    from kafkacheck.runner import RunOptions, simulate

    if sc.template is None:
        options = RunOptions(seed=seed, ops=ops, workload=sc.workload, faults=list(sc.faults),
                             bugs=[bug] if bug else [], group_protocol=sc.group_protocol, assignor=sc.assignor,
                             partitions=sc.partitions or 4)
    else:
        options = RunOptions(seed=seed, ops=ops, workload=sc.workload, faults=[], brokers=sc.brokers,
                             partitions=1, replication_factor=sc.brokers, min_insync_replicas=1,
                             bugs=[bug] if bug else [],
                             schedule=seeded_template(sc.template, seed, sc.brokers))
    r = judge(simulate(options, None).record())
    return seed, r["valid"], r["anomaly_types"], r["stats"]["client_ops"]


def command(bug: str | None, sc: Scenario, seed: int, ops: int) -> str:
    """The ``kafkacheck run`` that reproduces a run of the hunt, from its options."""
    from kafkacheck.reproduce import command_line

    return command_line(finding_options(bug, sc, seed, ops))


def finding_options(bug: str | None, sc: Scenario, seed: int, ops: int) -> dict:
    """The options of ``kafkacheck run`` (run.json's) that make a run of the hunt."""
    options: dict = {"seed": seed, "ops": ops}
    if sc.workload != "queue":
        options["workload"] = sc.workload
    if sc.template is not None:
        options |= {"brokers": sc.brokers, "partitions": 1, "min_insync_replicas": 1, "template": sc.template}
    elif sc.faults != ("partition", "kill", "pause", "disk"):
        options["faults"] = ",".join(sc.faults)
    if bug:
        options["bug"] = [bug]
    if sc.assignor != "range":
        options["assignor"] = sc.assignor
    if sc.group_protocol != "classic":
        options["group_protocol"] = sc.group_protocol
    if sc.partitions is not None:
        options["partitions"] = sc.partitions
    return options


def save_run(options: dict, out_dir: Path) -> Path:
    """A finding's run made again, as ``kafkacheck run`` makes it, into a run directory of its
    own under ``out_dir``, which ``kafkacheck run --replay DIR`` reproduces byte for byte."""
    import argparse
    import contextlib
    import io

    from kafkacheck.reproduce import run_finding_dir
    from kafkacheck.run import make, option_defaults

    out = out_dir / run_finding_dir(options)
    defaults = option_defaults()
    args = argparse.Namespace(**{**defaults, **options, "out": str(out), "format": "json", "no_progress": True})
    with contextlib.redirect_stdout(io.StringIO()):
        make(args)
    return out


def hunt(bug: str, runs: int, jobs: int | None, log=print, shrink: bool = True,
         time_limit: float = DEFAULT_TIME_LIMIT_S, out_dir: Path | None = None, spark=None) -> Outcome:
    """Seeds 0, 1, ... of ``bug``'s scenario until the first invalid verdict; the finding shrunk
    (``shrink``) and, with ``out_dir``, saved there as a run directory. The reported seed is the
    lowest invalid one of the budget, however many run at once: seeds start in order, and a
    detection waits for every lower seed under way. ``spark``: the runs as Spark tasks."""
    sc = SCENARIOS[bug]
    out = Outcome(bug, scenario=sc, runs_budget=runs)
    start = time.monotonic()
    with Tasks(jobs, spark) as pool:
        jobs = pool.slots
        pending: dict[int, object] = {}
        seed = 0
        while True:
            # after a detection, only the lower seeds already started still count
            while len(pending) < jobs and seed < runs and not out.detected:
                pending[seed] = pool.submit(_judge_run, (bug, sc, seed, sc.ops))
                seed += 1
            if out.detected:
                for s in [s for s in pending if s > out.seed]:
                    del pending[s]
            if not pending:
                break
            done = [s for s, p in pending.items() if p.ready()]
            if not done:
                if time.monotonic() - start > time_limit:
                    out.timed_out = not out.detected
                    break
                pool.wait(0.05)
                continue
            for s in sorted(done):
                h = pending.pop(s)
                _s, valid, kinds, _n = h.get()
                out.runs += 1
                log(f"  {bug}: seed {s} {'INVALID ' + ','.join(kinds) if valid is False else valid}"
                    f" ({time.monotonic() - start:.1f} s{_where(h)})")
                if valid is False and (not out.detected or s < out.seed):
                    if not out.detected:
                        out.seconds = time.monotonic() - start
                    out.detected, out.seed, out.anomalies = True, s, kinds
    if not out.detected:
        out.seconds = time.monotonic() - start
        return out
    ops = sc.ops
    out.shrunk_ops = ops
    if shrink:
        while ops // 2 >= 25:
            s, valid, kinds, n = _judge_run((bug, sc, out.seed, ops // 2))
            if valid is not False:
                break
            ops //= 2
            out.shrunk_ops, out.shrunk_client_ops = ops, n
            log(f"  {bug}: shrunk to {ops} ops ({','.join(kinds)})")
    out.command = command(bug, sc, out.seed, out.shrunk_ops)
    if out_dir is not None and out.detected:
        out.run_dir = str(save_run(finding_options(bug, sc, out.seed, out.shrunk_ops), out_dir))
    return out


def no_bug(runs: int, jobs: int | None, log=print, time_limit: float = DEFAULT_TIME_LIMIT_S,
           spark=None) -> Outcome:
    """The correct engine under the same scenarios, ``runs`` runs in all: nothing may be found."""
    out = Outcome(None, runs_budget=runs)
    start = time.monotonic()
    scenarios = NO_BUG_SCENARIOS + list(dict.fromkeys(SCENARIOS.values()))
    with Tasks(jobs, spark) as pool:
        jobs = pool.slots
        pending = []
        i = 0
        while i < runs or pending:
            while len(pending) < jobs and i < runs:
                sc = scenarios[i % len(scenarios)]
                pending.append((sc, pool.submit(_judge_run, (None, sc, i // len(scenarios), sc.ops))))
                i += 1
            done = [x for x in pending if x[1].ready()]
            if not done:
                if time.monotonic() - start > time_limit:
                    out.timed_out = True
                    break
                pool.wait(0.05)
                continue
            for x in done:
                pending.remove(x)
                s, valid, kinds, _n = x[1].get()
                out.runs += 1
                verdict = valid if valid is not False else "INVALID " + ",".join(kinds)
                log(f"  no switch: {x[0].workload} seed {s} {verdict}" + (f" ({_where(x[1])[2:]})" if _where(x[1]) else ""))
                if valid is False:
                    out.false_positives.append((x[0].workload, s, kinds))
    out.seconds = time.monotonic() - start
    return out


def _verdict(o: Outcome) -> str:
    if o.bug is None:
        if o.false_positives or o.machine_found:
            return "FALSE POSITIVE"
        if o.timed_out or o.machine_timed_out:
            return f"unknown: time limit after {o.runs} of {o.runs_budget} runs" if o.timed_out else \
                f"unknown: the time limit stopped machine {', '.join(o.machine_cut)}"
        return "nothing, as it must"
    if o.detected:
        return "yes"
    if o.timed_out:
        return f"unknown: time limit after {o.runs} of {o.runs_budget} runs"
    return "NO"


def machine_missed(o: Outcome) -> bool:
    """A switch's machine ran all its programs without finding it."""
    return o.bug is not None and o.machine is not None and not o.machine_found and not o.machine_timed_out


def machine_unknown(o: Outcome) -> bool:
    """The safety net stopped a machine before its programs were run (and it found nothing)."""
    return o.machine is not None and not o.machine_found and o.machine_timed_out


def verdict(outcomes: list[Outcome]) -> tuple[int, str]:
    """The exit code of a --bug/--all hunt and its verdict line: every switch detected and
    nothing found without one (0); a switch missed or a finding without one (1); a time limit
    cut a hunt short (2)."""
    missed = [o.bug or "no switch" for o in outcomes
              if (o.bug is not None and not o.detected and not o.timed_out) or machine_missed(o)]
    false = [o for o in outcomes if o.bug is None and (o.false_positives or o.machine_found)]
    unknown = [o.bug or "the correct engine" for o in outcomes if o.timed_out or machine_unknown(o)]
    switches = sum(o.bug is not None for o in outcomes)
    if missed or false:
        return EXIT_INVALID, ("[bold red]FAILED[/]: " + "; ".join(
            ([f"missed {', '.join(missed)}"] if missed else []) +
            (["a finding without a switch"] if false else [])))
    if unknown:
        return EXIT_UNKNOWN, f"[bold yellow]unknown[/]: the time limit cut {', '.join(unknown)} short"
    return EXIT_VALID, (f"[bold green]passed[/]: {switches} switch{'es' if switches != 1 else ''} detected"
                        + (", nothing found without one" if any(o.bug is None for o in outcomes) else ""))


def print_table(outcomes: list[Outcome], runs: int) -> None:
    """The verdict, then a row a switch; the lines to copy (reproduce commands) below."""
    from rich.table import Table

    from kafkacheck.console import stdout_console

    console = stdout_console()
    console.print(verdict(outcomes)[1])
    t = Table(title=f"kafkacheck hunt (up to {runs} runs a switch)")
    machines = any(o.machine for o in outcomes)
    for col in ("bug switch", "detected", "anomaly", "seconds", "runs", "seed",
                "shrunk to", *(["Hypothesis machine"] if machines else [])):
        t.add_column(col)
    for o in outcomes:
        if o.bug is None:
            t.add_row("(none)", _verdict(o),
                      ", ".join(sorted({k for _w, _s, ks in o.false_positives for k in ks})) or "-",
                      f"{o.seconds:.1f}", str(o.runs), "-", "-", *([_machine_cell(o)] if machines else []))
            continue
        t.add_row(o.bug, _verdict(o), ", ".join(o.anomalies) or "-",
                  f"{o.seconds:.1f}", str(o.runs), str(o.seed) if o.detected else "-",
                  f"{o.shrunk_ops} ops" if o.detected else "-", *([_machine_cell(o)] if machines else []))
    console.print(t)
    for o in outcomes:  # plain lines, so that they can be copied whatever the terminal width
        if o.detected:
            print(f"{o.bug}: reproduce with: {o.command}"
                  + (f" (saved: kafkacheck run --replay {o.run_dir})" if o.run_dir else ""))
        for workload, seed, kinds in o.false_positives:
            print(f"no switch: {workload} seed {seed} INVALID ({', '.join(kinds)})")
        if machine_missed(o):
            print(f"{o.bug}: machine {o.machine} did not find it in {_programs(o.machine_programs)}")
        if o.machine_found:
            print(f"{o.bug or 'no switch'}: machine {o.machine_found}")
            if o.machine_program_file:
                print(f"  replay (and shrink with kafkacheck explore) with: kafkacheck explore --replay "
                      f"{o.machine_program_file}")
        if o.timed_out and not (o.detected or o.false_positives):
            print(f"{o.bug or 'no switch'}: unknown: the {o.seconds:.0f} s time limit stopped it after "
                  f"{o.runs} of {o.runs_budget} runs (a busy machine? raise --time-limit)")


def _machine_cell(o: Outcome) -> str:
    """Short: the finding itself is printed below the table."""
    if not o.machine:
        return "-"
    if o.machine_found:
        name = o.machine_found.split(": ", 1)[0]
        return f"{name}: found after {_programs(o.machine_found_after)}, {o.machine_found_seconds:.1f} s"
    if o.machine_timed_out:
        return f"unknown: the time limit stopped {', '.join(o.machine_cut)}"
    what = "nothing" if o.bug is None else "NOT FOUND"
    return f"{o.machine}: {what} in {_programs(o.machine_programs)}, {o.machine_seconds:.0f} s"


def _programs(n: int | None) -> str:
    return f"{n} program" if n == 1 else f"{n} programs"


def main(bugs: list[str], all_: bool, with_none: bool, runs: int, jobs: int | None, quiet: bool,
         machines: bool = False, time_limit: float = DEFAULT_TIME_LIMIT_S,
         machine_time: float = DEFAULT_MACHINE_TIME_S,
         machine_programs: int = DEFAULT_MACHINE_PROGRAMS, out_dir: Path = Path("runs/hunt"),
         spark_master: str | None = None) -> int:
    """``out_dir``: where findings are saved (runs as run directories, machines' programs).
    ``spark_master``: the seeds as Spark tasks there (the machines run on this machine).
    Exit 0: every switch detected (by its
    seeds, and by its machine with ``machines``) and nothing found without one; 1: a switch
    missed within its runs or programs, or a finding without a switch; 2: otherwise undecided
    (a time limit cut a hunt or a machine short)."""
    def log(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    names = list(BUGS) if all_ else bugs
    outcomes = []
    with spark_session(spark_master, log) as spark:
        for name in names:
            log(f"hunting {name} ({SCENARIOS[name].workload}, {SCENARIOS[name].ops} ops a run, up to {runs} runs)")
            outcomes.append(hunt(name, runs, jobs, log, time_limit=time_limit, out_dir=out_dir, spark=spark))
            if machines:
                from kafkacheck.explore import MACHINE_FOR_BUG
                hunt_machine(outcomes[-1], MACHINE_FOR_BUG[name], [name], machine_programs, machine_time, log,
                             out_dir)
        if with_none:
            log(f"running the correct engine (no switch), {runs} runs")
            outcomes.append(no_bug(runs, jobs, log, time_limit=time_limit, spark=spark))
            if machines:
                from kafkacheck.explore import MACHINES
                for m in MACHINES:
                    hunt_machine(outcomes[-1], m, [], machine_programs, machine_time, log, out_dir)
    print_table(outcomes, runs)
    return verdict(outcomes)[0]

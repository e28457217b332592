"""``kafkacheck model-check``: bounded model checking of the replication and transaction
models (z3)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.exits import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, UsageError


def variants() -> dict[str, str]:
    from properties.formal import replication, transactions

    return {**replication.VARIANTS, **transactions.VARIANTS}


def build(variant: str, replicas: int, log_len: int):
    from properties.formal import replication, transactions

    if variant in transactions.VARIANTS:
        return transactions.TxnModel(variant), transactions.BUG_SWITCH[variant]
    return replication.Model(variant, replicas=replicas, log_len=log_len), replication.BUG_SWITCH[variant]


def add_parser(sub: argparse._SubParsersAction) -> None:
    mc = sub.add_parser(
        "model-check", help=SUMMARIES["model-check"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Unroll a z3 model of one partition (leader append, follower fetch and truncation, "
            "high-watermark advance, ISR shrink and expand, crashes and restarts, elections) or of "
            "a transactional producer (epochs, markers, late requests) --depth steps and look for a "
            "state that breaks an invariant (committed records never lost, log matching, one "
            "leader per epoch, the leader in the ISR, transactions settled with their own outcome). "
            "Prints the shortest counterexample as a step table (exit 1) or 'no violation up to "
            "depth K' (exit 0).\n\nVariants:\n" + "\n".join(
                f"  {k}: {v}" for k, v in variants().items())),
        epilog="--replay turns a counterexample into a fault schedule for the simulator and runs it on the "
               "engine with the matching bug switch (the checker must report the anomaly) and without it "
               "(it must not).")
    mc.add_argument("--variant", required=True, metavar="NAME", help="the protocol variant (see above)")
    mc.add_argument("--depth", type=int, default=10, metavar="K", help="steps to unroll (default 10)")
    mc.add_argument("--replicas", type=int, default=2, help="replicas of the partition: 2 or 3 (default 2)")
    mc.add_argument("--log-len", type=int, default=2, metavar="L",
                    help="the longest log the model holds (default 2)")
    mc.add_argument("--induction", type=int, default=0, metavar="K",
                    help="after a clean BMC run, try k-induction for k = 1..K")
    mc.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    mc.add_argument("--replay", action="store_true", help="replay the counterexample on the engine")
    mc.add_argument("--replay-seeds", type=int, default=20, metavar="N",
                    help="seeds to try for the replay (default 20)")


def _state_text(state: dict) -> str:
    if "replicas" in state:  # replication
        parts = []
        for r, rep in enumerate(state["replicas"]):
            flags = ("L" if state["leader"] == r else "") + ("" if rep["alive"] else "†") + ("" if rep["isr"] else "-isr")
            parts.append(f"r{r}{'(' + flags + ')' if flags else ''} [{' '.join(rep['log'])}] hw={rep['hw']}")
        return f"e{state['epoch']}  " + "  ".join(parts) + f"  committed={state['committed']}"
    return (f"T{state['txn']} e{state['epoch']} {'open' if state['ongoing'] else 'ended'}  "
            f"outcomes={state['outcomes']}  in flight={state['in_flight']}  "
            f"partition e{state['partition_epoch']} {state['records']}")


def _undecided_text(ks: list[int]) -> str:
    return "; z3 could not decide k=" + ", ".join(map(str, ks)) if ks else ""


def main(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from kafkacheck.console import stdout_console
    from properties.formal.bmc import as_dict, check, k_induction

    known = variants()
    if args.variant not in known:
        raise UsageError(f"unknown --variant {args.variant!r}; known: {', '.join(known)}")
    if args.depth < 1 or args.depth > 40:
        raise UsageError("--depth must be between 1 and 40")
    if args.replicas not in (2, 3) or not 1 <= args.log_len <= 4:
        raise UsageError("--replicas must be 2 or 3 and --log-len between 1 and 4")
    model, bug = build(args.variant, args.replicas, args.log_len)
    console = stdout_console()
    with console.status(f"{args.variant}: bounded model checking to depth {args.depth}") as status:
        result = check(model, args.depth,
                       progress=lambda k, s: status.update(f"{args.variant}: no violation up to depth {k} "
                                                           f"({s:.1f} s); depth {k + 1}..."))
    if result.ok and args.induction:
        with console.status(f"k-induction up to k={args.induction}"):
            # the base case of k-induction is BMC clean to depth k - 1
            undecided = []
            for k in range(1, min(args.induction, args.depth + 1) + 1):
                closed = k_induction(model, k)
                if closed is None:
                    undecided.append(k)
                elif closed:
                    result.induction = k
                    break
    if args.json:
        Path(args.json).write_text(json.dumps(as_dict(result), indent=2) + "\n")
    if result.unknown is not None:
        console.print(f"{args.variant}: unknown: no violation up to depth {result.checked_depth}, and z3 could "
                      f"not decide depth {result.checked_depth + 1} ({result.unknown}; {result.seconds:.1f} s)")
        code = EXIT_UNKNOWN
    elif result.ok:
        console.print(f"{args.variant}: no violation up to depth {args.depth} ({result.seconds:.1f} s)")
        if args.induction:
            console.print(f"k-induction: closed at k={result.induction} (with the model's lemmas), so the "
                          f"invariants hold at every depth for this model's sizes"
                          if result.induction else
                          f"k-induction: did not close up to k={args.induction} (the invariants are not "
                          f"inductive alone{_undecided_text(undecided)}), "
                          f"so the verdict stands to depth {args.depth} only")
        code = EXIT_VALID
    else:
        table = Table(title=f"{args.variant}: {result.violated} violated after {result.depth} steps "
                            f"({result.seconds:.1f} s)")
        table.add_column("#", justify="right")
        table.add_column("action")
        table.add_column("state after it")
        for i, step in enumerate(result.steps):
            who = "" if step["replica"] is None else f" {'r' if 'replicas' in step['state'] else 'slot '}{step['replica']}"
            table.add_row(str(i), step["action"] + who, escape(_state_text(step["state"])))
        console.print(table)
        code = EXIT_INVALID
    if args.replay:
        from kafkacheck.replay import replay

        if result.violated is None:
            console.print("--replay: nothing to replay (no counterexample)")
        else:
            ok = replay(args.variant, result, bug, console, seeds=args.replay_seeds)
            if not ok:
                print("kafkacheck: the replay did not show the predicted verdicts", file=sys.stderr)
                return EXIT_UNKNOWN
    return code

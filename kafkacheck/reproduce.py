"""How a simulated run is reproduced: the options it was made with, as data.

``kafkacheck run`` records its options in run.json (``"options"``: the seed, the op count, and
every option that differs from its default); ``kafkacheck run --replay DIR`` runs them again.
The command line a run or a hunt prints is derived from such a dict by :func:`command_line`,
and the default run directory's name by :func:`run_dir_name`: nothing parses a command back.
"""

from __future__ import annotations

import hashlib
import shlex

# the order the options are printed in (and hashed in, for the run directory's name)
ORDER = ("seed", "ops", "workload", "brokers", "partitions", "replication_factor", "min_insync_replicas", "acks",
         "faults", "schedule", "template", "bug", "clients", "flush_messages", "flush_ms",
         "unclean_leader_election", "keep_going", "transaction_version", "assignor", "static_members",
         "group_protocol", "producer_epoch_start")
SWARM_ORDER = ("swarm", "ops", "bug", "keep_going")
# the options that name a run directory's run without making it differ (its run id says them)
_NAMED_BY_RUN_ID = ("seed", "workload", "bug")


def _words(name: str, value: object) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if isinstance(value, (list, tuple)):
        return [w for v in value for w in (flag, str(v))]
    return [flag, str(value)]


def command_line(options: dict) -> str:
    """``kafkacheck run`` with ``options`` (a dict of run.json's ``"options"``)."""
    order = SWARM_ORDER if "swarm" in options else ORDER
    unknown = sorted(set(options) - set(order))
    if unknown:
        raise ValueError(f"not options of kafkacheck run: {', '.join(unknown)}")
    return " ".join(["kafkacheck", "run", *(w for name in order if name in options
                                             for w in _words(name, options[name]))])


def changed_options(args, defaults: dict) -> dict:
    """The options of ``args`` (an argparse namespace) that differ from ``defaults`` (the
    command's parser's), in the parser's order: what a command other than run (conform)
    records of how it was made."""
    return {name: getattr(args, name) for name, default in defaults.items()
            if name != "command" and hasattr(args, name)
            and getattr(args, name) not in (default, None, False)}


def cli_command(command: str, options: dict) -> str:
    """``kafkacheck COMMAND`` with ``options`` (as :func:`changed_options` gives them), quoted
    for a shell."""
    words = ["kafkacheck", command]
    for name, value in options.items():
        if name == "straggle_api":  # one option, its APIs comma-separated
            value = ",".join(map(str, value))
        words += _words(name, value)
    return shlex.join(words)


def run_finding_dir(options: dict) -> str:
    """The run directory of a hunt's finding: what it reproduces, and a short hash of it."""
    what = (f"swarm{options['swarm']}" if "swarm" in options
            else f"seed{options['seed']}-{options.get('workload', 'queue')}")
    bugs = "-".join(options.get("bug") or ["correct"])
    return f"finding-{what}-{bugs}-{hashlib.sha256(command_line(options).encode()).hexdigest()[:8]}"


def run_dir_name(run_id: str, options: dict, default_ops: int) -> str:
    """The default run directory: the run id, and when any option besides the seed, workload
    and bug switches differs from its default, a short hash of them, so that runs made with
    different options never share (and overwrite) a directory."""
    if "swarm" in options:
        return (f"swarm{options['swarm']}-{run_id.split('-', 1)[1]}-"
                f"{hashlib.sha256(command_line(options).encode()).hexdigest()[:8]}")
    words = [w for name in ORDER if name in options and name not in _NAMED_BY_RUN_ID
             for w in _words(name, options[name])]
    if words == ["--ops", str(default_ops)]:
        return run_id
    return f"{run_id}-{hashlib.sha256(' '.join(words).encode()).hexdigest()[:8]}"

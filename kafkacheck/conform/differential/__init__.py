"""Differential testing: the same scripted request sequences sent to the reference broker and to
Apache Kafka, and their answers compared field by field.

Theory of operation
-------------------
A *script* (:data:`SCRIPTS`) is a short sequence of raw Kafka requests, written once, with
names and values that do not depend on the broker: it creates its own topics and groups (with
a run suffix), and each request it sends is a *step* whose answer is recorded. :class:`Wire`
sends them on raw sockets with kafka-python's protocol classes, at one version per API: the
highest that both brokers serve (``ApiVersions``) and kafka-python encodes, so both answers have
the same schema. Requests go where a client would send them: partition requests to the leader,
group and transaction requests to the coordinator (found with FindCoordinator).

An answer is *normalised* before the comparison (:func:`normalise`): what differs between any
two clusters is dropped (addresses, node ids, cluster and topic ids, throttle times, error
messages, timestamps the broker stamps) and what a broker invents is renamed in order of first
appearance (``producer-1``, ``member-1``), so two answers that mean the same compare equal.
Record sets are decoded into batches (offsets, control and transactional flags, records).
Then both answers are flattened into ``path: value`` and compared (:func:`compare`).

Every difference must be fixed in the engine or declared in :data:`DEVIATIONS` (the table of
the docs' "Deviations from Kafka"), with the reason; a declared deviation that no longer
differs is reported too, so the table stays true. ``kafkacheck differential`` runs it;
``tests/kafkacheck/test_differential.py`` runs it in the default test suite.

* :mod:`~kafkacheck.conform.differential.wire` -- raw requests, one version per API;
* :mod:`~kafkacheck.conform.differential.scripts` -- the scripts;
* :mod:`~kafkacheck.conform.differential.compare` -- normalisation, comparison, the deviations;
* this module -- running the scripts on both brokers (``kafkacheck differential``:
  :mod:`kafkacheck.commands.differential`).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafkacheck.conform.differential.compare import (
    DEVIATIONS,
    Deviation,
    Difference,
    Names,
    Result,
    compare,
    decode_record_set,
    flatten,
    normalise,
)
from kafkacheck.conform.differential.scripts import SCRIPTS, Script, Session
from kafkacheck.conform.differential.wire import Wire, WireError, common_versions

__all__ = ["DEVIATIONS", "SCRIPTS", "Deviation", "Difference", "Names", "Result", "Script", "Session", "Wire",
           "WireError", "common_versions", "compare", "decode_record_set", "flatten",
           "normalise", "run"]


def run(target: Wire, kafka: Wire, scripts: list[Script] | None = None, log=print,
        deviations: list[Deviation] | None = None) -> Result:
    """Run each script against both brokers and compare; ``deviations``: the declared ones
    (the reference broker's by default; pass [] for another broker)."""
    deviations = DEVIATIONS if deviations is None else deviations
    differences: list[Difference] = []
    errors: dict[str, str] = {}
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for sc in scripts or SCRIPTS:
        suffix = "-" + uuid.uuid4().hex[:8]
        sides = {}
        for side, wire in (("target", target), ("kafka", kafka)):
            session = Session(wire, Names(suffix))
            try:
                sc.run(session)
            except Exception as e:
                errors[sc.name] = f"{side}: {type(e).__name__}: {e}"
            sides[side] = session.steps
        steps[sc.name] = sides
        found = compare(sc.name, sides["target"], sides["kafka"], deviations)
        differences += found
        log(f"{sc.name}: {len(sides['kafka'])} steps, {len(found)} differences "
            f"({sum(d.declared is None for d in found)} undeclared)"
            + (f"; error: {errors[sc.name]}" if sc.name in errors else ""))
    return Result(differences, errors, steps, list(deviations))

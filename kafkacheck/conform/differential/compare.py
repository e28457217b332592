"""What a differential comparison compares: answers normalised (what differs between any two
clusters dropped, invented values renamed, record sets decoded), flattened to ``path: value``,
and compared; the declared deviations (:data:`DEVIATIONS`, the table of docs/reference/deviations.md) excuse
the differences they match."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from reference import records as rec

# fields that differ between any two clusters, whatever the broker: dropped before comparing
DROPPED = {"throttle_time_ms", "error_message", "cluster_id", "controller_id", "brokers", "node_endpoints",
           "host", "port", "rack", "node_id", "topic_id", "log_append_time_ms", "current_leader", "leader_id",
           "authorized_operations", "topic_authorized_operations", "cluster_authorized_operations",
           "session_id", "preferred_read_replica", "unknown_tags", "tags", "coordinator_key", "key",
           "timestamp"}
# values a broker invents: renamed in order of first appearance within a script
RENAMED = {"producer_id": "producer", "member_id": "member", "leader": "member"}


def decode_record_set(data: bytes | None) -> list[dict]:
    """A fetched record set as batches a person can compare."""
    if not data:
        return []
    batches, _end = rec.split_batches(bytes(data))
    out = []
    for b in batches:
        h = rec.parse_header(b)
        control = bool(h.attributes & rec.ATTR_CONTROL)
        entry: dict[str, Any] = {"base_offset": h.base_offset, "last_offset": rec.last_offset_of(b),
                                 "transactional": bool(h.attributes & rec.ATTR_TRANSACTIONAL), "control": control,
                                 "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                                 "base_sequence": h.base_sequence}
        if control:
            entry["commit"] = rec.control_is_commit(b)
        else:
            entry["records"] = [[h.base_offset + i, _text(r.key), _text(r.value)]
                                for i, r in enumerate(rec.decode_records(b))]
        out.append(entry)
    return out


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode(errors="replace")


@dataclass
class Names:
    """Renames invented values (producer ids, member ids) in order of first appearance, and
    the run suffix of topic and group names."""

    suffix: str
    seen: dict[tuple[str, Any], str] = field(default_factory=dict)

    def rename(self, kind: str, value: Any) -> Any:
        if value in (None, "", -1):
            return value
        name = self.seen.get((kind, value))
        if name is None:
            name = self.seen[(kind, value)] = f"{kind}-{sum(k == kind for k, _ in self.seen) + 1}"
        return name


def normalise(value: Any, names: Names, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalise(v, names, k) for k, v in sorted(value.items()) if k not in DROPPED}
    if isinstance(value, list):
        out = [normalise(v, names, key) for v in value]
        if key == "members":  # a group's members come in no particular order
            out.sort(key=lambda m: str(m.get("member_id")) if isinstance(m, dict) else "")
        return out
    if isinstance(value, (bytes, bytearray, memoryview)):
        if key == "records":
            return normalise(decode_record_set(bytes(value)), names)
        return bytes(value).hex()
    if key in RENAMED:
        return names.rename(RENAMED[key], value)
    if isinstance(value, str) and names.suffix in value:
        return value.replace(names.suffix, "")
    return value


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{k}" if path else k))
        return out or {path: {}}
    if isinstance(value, list):
        out = {f"{path}#len": len(value)}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{path}[{i}]"))
        return out
    return {path: value}


@dataclass(frozen=True)
class Deviation:
    """A declared difference: ``path`` of ``step`` in ``script`` (fnmatch patterns)."""

    id: str
    script: str
    step: str
    path: str
    reason: str


# The "Deviations from Kafka" of docs/reference/deviations.md that the scripts observe; each must still differ
# (a deviation that no longer does is reported, so the table stays true).
DEVIATIONS: list[Deviation] = [
    Deviation("create-topics-configs", "*", "*", "topics[0].configs*",
              "CreateTopics v5+ answers a created topic with its configs (KIP-525): Kafka lists all of "
              "its 33 topic configs with Kafka's defaults; the reference lists the ones its engine "
              "applies, with the engine's defaults (segment.bytes 1 MiB, no time-based retention). "
              "The list must be there: when it was null the Java AdminClient failed every "
              "createTopics (found by --client java)."),
]


@dataclass
class Difference:
    script: str
    step: str
    path: str
    target: Any  # the broker compared with Kafka (the reference by default)
    kafka: Any
    declared: str | None = None  # the Deviation id

    def line(self, target: str = "reference") -> str:
        return f"{self.script} / {self.step} / {self.path}: {target} {self.target!r}, kafka {self.kafka!r}"


def _match(text: str, pattern: str) -> bool:
    """fnmatch with ``*`` as the only wildcard (paths have brackets: ``topics[0].configs``)."""
    return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]").replace("?", "[?]"))


def compare(script_name: str, target: dict[str, Any], kafka: dict[str, Any],
            deviations: list[Deviation] | None = None) -> list[Difference]:
    out = []
    for step in sorted(set(target) | set(kafka), key=lambda k: (list(target) + list(kafka)).index(k)):
        a, b = flatten(target.get(step, "<no answer>")), flatten(kafka.get(step, "<no answer>"))
        for path in sorted(set(a) | set(b)):
            if a.get(path, "<absent>") != b.get(path, "<absent>"):
                d = Difference(script_name, step, path, a.get(path, "<absent>"), b.get(path, "<absent>"))
                for dev in DEVIATIONS if deviations is None else deviations:
                    if _match(script_name, dev.script) and _match(step, dev.step) and _match(path, dev.path):
                        d.declared = dev.id
                        break
                out.append(d)
    return out


@dataclass
class Result:
    differences: list[Difference]
    errors: dict[str, str]  # script -> what broke while running it
    steps: dict[str, dict[str, dict[str, Any]]]  # script -> "target"/"kafka" -> step -> answer
    deviations: list[Deviation] = field(default_factory=lambda: list(DEVIATIONS))

    @property
    def undeclared(self) -> list[Difference]:
        return [d for d in self.differences if d.declared is None]

    @property
    def stale(self) -> list[Deviation]:
        """Declared deviations no difference matched: fixed, or the script changed."""
        seen = {d.declared for d in self.differences}
        ran = [s for s in self.steps if s not in self.errors]
        return [dev for dev in self.deviations if dev.id not in seen and any(_match(s, dev.script) for s in ran)]



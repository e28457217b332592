"""What the eos workload's simulated and real processors share: the group names, and how an
output value names its input (:mod:`kafkacheck.workloads.eos`, :mod:`kafkacheck.workloads.eos_real`)."""

from __future__ import annotations

GROUP = "eos"
REAL_GROUP = "kafkacheck-eos"  # with real clients
# an output value names its input value and the attempt that copied it, so that every write
# is unique (Jepsen's rule) and the checker can map output back to input
SOURCE_SHIFT = 1 << 24


def output_value(input_value: int, attempt: int) -> int:
    return input_value * SOURCE_SHIFT + attempt


def source_of(value: int) -> int:
    return value // SOURCE_SHIFT

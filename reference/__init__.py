"""The sans-IO reference Kafka engine: records, logs, replication, controller, coordinators,
clients.

Core modules import only the standard library and ``crc32c``: no I/O, clock or randomness
(enforced by tests/test_layers.py). :mod:`reference.server` is the only I/O shell: the same
engine behind the Kafka wire protocol. Where to look:

* a broker: :mod:`~reference.broker` (lifecycle and the routing tables) over
  :mod:`~reference.broker_state`, with :mod:`~reference.produce`, :mod:`~reference.leader`,
  :mod:`~reference.follower`, :mod:`~reference.cleaner` and :mod:`~reference.purgatory`;
* a partition replica's rules: :mod:`~reference.partition`; its log: :mod:`~reference.log`,
  :mod:`~reference.records`, :mod:`~reference.producer_state`;
* the controller: :mod:`~reference.controller`;
* the coordinators: :mod:`~reference.coordinator` (what they share),
  :mod:`~reference.txn_coordinator`, :mod:`~reference.group_coordinator` and
  :mod:`~reference.group_state`, with KIP-848's consumer groups in
  :mod:`~reference.consumer_group_coordinator` and :mod:`~reference.consumer_group`;
* clients: :mod:`~reference.producer`, :mod:`~reference.txn_producer`,
  :mod:`~reference.consumer`, :mod:`~reference.group_consumer`,
  :mod:`~reference.modern_consumer` (KIP-848), :mod:`~reference.assignors`;
* the rest: :mod:`~reference.messages` (with :mod:`~reference.group_messages` and
  :mod:`~reference.share_messages`), :mod:`~reference.errors`, :mod:`~reference.node`,
  :mod:`~reference.storage`, :mod:`~reference.invariants`, :mod:`~reference.marks`,
  :mod:`~reference.bugs`;
* which engine runs, compiled or the Python source: :mod:`~reference.compiled`.
"""

import importlib

from reference import compiled

# the engine's modules come compiled (by mypyc, when pip built kafkacheck) or from their
# Python source: reference.compiled decides, before the first of them is imported
compiled.install()

# the package's names, imported when first used (PEP 562): importing one module of the package
# (``kafkacheck check`` needs only a few) does not import all of it
_EXPORTS = {
    "Broker": "reference.broker",
    "BrokerConfig": "reference.broker",
    "BUGS": "reference.bugs",
    "parse_bugs": "reference.bugs",
    "Consumer": "reference.consumer",
    "ConsumerConfig": "reference.consumer",
    "Controller": "reference.controller",
    "ControllerConfig": "reference.controller",
    "Errors": "reference.errors",
    "PartitionLog": "reference.log",
    "TopicPartition": "reference.messages",
    "Producer": "reference.producer",
    "ProducerConfig": "reference.producer",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = [
    "BUGS",
    "Broker",
    "BrokerConfig",
    "Consumer",
    "ConsumerConfig",
    "Controller",
    "ControllerConfig",
    "Errors",
    "PartitionLog",
    "Producer",
    "ProducerConfig",
    "TopicPartition",
    "parse_bugs",
]

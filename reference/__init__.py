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
  :mod:`~reference.group_state`;
* clients: :mod:`~reference.producer`, :mod:`~reference.txn_producer`,
  :mod:`~reference.consumer`, :mod:`~reference.group_consumer`, :mod:`~reference.assignors`;
* the rest: :mod:`~reference.messages`, :mod:`~reference.errors`, :mod:`~reference.node`,
  :mod:`~reference.storage`, :mod:`~reference.invariants`, :mod:`~reference.marks`,
  :mod:`~reference.bugs`.
"""

from reference.broker import Broker, BrokerConfig
from reference.bugs import BUGS, parse_bugs
from reference.consumer import Consumer, ConsumerConfig
from reference.controller import Controller, ControllerConfig
from reference.errors import Errors
from reference.log import PartitionLog
from reference.messages import TopicPartition
from reference.producer import Producer, ProducerConfig

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

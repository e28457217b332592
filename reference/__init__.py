"""The sans-IO reference Kafka engine: records, logs, replication, controller, clients.

Core modules import only the standard library and ``crc32c``: no I/O, clock or randomness
(enforced by tests/test_layers.py). ``reference.server`` (a later issue) is the only I/O
shell.
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

"""The engine messages that travel between the processes of a served cluster (one process per
broker: reference/server/peers.py) survive the codec, share groups' included: a broker's read
of a share-partition's state from the share coordinator on another broker is one."""

from __future__ import annotations

import dataclasses

from reference import group_messages, messages, share_messages
from reference.errors import Errors
from reference.messages import TopicPartition
from reference.server.peers import decode, encode
from reference.share_messages import (
    AcquiredRange,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareFetchResponse,
    SharePartitionData,
    WriteShareGroupStateRequest,
)


def _round_trip(message):
    frame = encode(1, 2, message)
    return decode(frame[4:])


def test_share_coordinator_messages_cross_processes():
    tp = TopicPartition("t", 3)
    for message in (ReadShareGroupStateRequest(7, "g", tp, 4),
                    ReadShareGroupStateResponse(7, Errors.NONE, 2, 10, ((10, 12, 0, 1), (13, 13, 2, 3))),
                    WriteShareGroupStateRequest(8, "g", tp, 4, 2, 11, ((11, 11, 4, 5),)),
                    ShareFetchResponse(9, Errors.NONE, (SharePartitionData(tp, records=(b"\x00\x01",),
                                                                           acquired=(AcquiredRange(0, 1, 2),)),), 30)):
        assert _round_trip(message) == (1, 2, message)


def test_every_engine_message_class_is_known_to_the_codec():
    from reference.server import peers

    for module in (messages, group_messages, share_messages):
        for name, cls in vars(module).items():
            if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__:
                assert peers._CLASSES.get(name) is cls, name

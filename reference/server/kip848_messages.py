"""kafka-python message classes of KIP-848's APIs, from the schemas in
:mod:`reference.server.schemas`: importing this module registers them beside kafka-python's
own classes, so :mod:`reference.server.protocol` finds them by API key."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from reference.server import schemas


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas): pass  # noqa: E701
class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas): pass  # noqa: E701
class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas): pass  # noqa: E701
class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas): pass  # noqa: E701

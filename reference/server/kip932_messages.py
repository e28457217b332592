"""kafka-python message classes of KIP-932's share-group APIs (ShareGroupHeartbeat,
ShareGroupDescribe, ShareFetch, ShareAcknowledge), from the schemas in
:mod:`reference.server.schemas`: importing this module registers them beside kafka-python's
own classes, so :mod:`reference.server.protocol` finds them by API key."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from reference.server import schemas


class ShareGroupHeartbeatRequest(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareGroupHeartbeatResponse(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareGroupDescribeRequest(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareGroupDescribeResponse(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareFetchRequest(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareFetchResponse(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareAcknowledgeRequest(ApiMessage, load_json=schemas): pass  # noqa: E701
class ShareAcknowledgeResponse(ApiMessage, load_json=schemas): pass  # noqa: E701

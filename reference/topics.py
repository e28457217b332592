"""Topic names: the internal topics and Kafka's rule for a legal name (``Topic.validate``):
1-249 characters of ASCII letters, digits, ``.``, ``_`` and ``-``, and neither ``.`` nor
``..``. The controller applies it to every CreateTopics, whoever sends it; the gateway to
names it is asked about."""

from __future__ import annotations

import re

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = (OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC)
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def legal_topic_name(name: object) -> bool:
    return isinstance(name, str) and bool(_LEGAL.match(name)) and name not in (".", "..")

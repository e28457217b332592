"""The share-group (KIP-932) handles of the workload: :class:`ShareMember`, librdkafka's share
consumer (the Java client's is :class:`kafkacheck.real.java_clients.JavaShareMember`, with
the same interface), and what both share: the acknowledgement types, client ids, and
librdkafka's error names as Kafka's."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

from kafkacheck.real.client_debug import rdkafka_debug
from kafkacheck.real.clients import ShareRec
from kafkacheck.real.handles import bounded

ACK_TYPES = ("accept", "release", "reject")
_share_ids = itertools.count(1)


def share_client_id(group: str) -> str:
    """The client.id of a share-group member: ``kafkacheck-share-GROUP-N``."""
    return f"kafkacheck-share-{group}-{next(_share_ids)}"


# librdkafka's names that differ from Kafka's (Errors): its older names of a few broker errors,
# and its local errors for a request that got no answer
_RDKAFKA_NAMES = {"INVALID_MSG": "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION",
                  "INVALID_MSG_SIZE": "INVALID_FETCH_SIZE", "NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER",
                  "MSG_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE", "STALE_CTRL_EPOCH": "STALE_CONTROLLER_EPOCH",
                  "TOPIC_EXCEPTION": "INVALID_TOPIC_EXCEPTION", "_TIMED_OUT": "REQUEST_TIMED_OUT",
                  "_MSG_TIMED_OUT": "REQUEST_TIMED_OUT", "_TRANSPORT": "NETWORK_EXCEPTION"}


def rdkafka_error_name(error: Any) -> str:
    """Kafka's uppercase name for a librdkafka error (a KafkaException or a KafkaError), as
    the Java client's ``Errors.forException`` names it: librdkafka's names of the broker's
    errors, except a few older ones (``NOT_LEADER_FOR_PARTITION`` is ``NOT_LEADER_OR_FOLLOWER``),
    its local timeouts and transport failures as ``REQUEST_TIMED_OUT`` and
    ``NETWORK_EXCEPTION``; other local errors keep librdkafka's name (``_STATE``, ...)."""
    err = error.args[0] if isinstance(error, Exception) and error.args else error
    name = err.name() if hasattr(err, "name") else type(error).__name__
    return _RDKAFKA_NAMES.get(name, name)


class ShareMember:
    """A member of the share group ``group`` (KIP-932) subscribed to ``topic``:
    confluent-kafka's ShareConsumer in explicit acknowledgement mode.

    * :meth:`poll` returns the records the member acquired, with their delivery counts
      (``Message.delivery_count()``: 1 the first time a record is acquired; -1 if librdkafka
      gives none). As in the Java client, in explicit mode a poll is refused
      (IllegalStateException) while a record of the previous poll is unacknowledged.
    * :meth:`acknowledge` marks one of them ``accept``, ``release`` or ``reject``, locally
      (``acknowledge_offset``): nothing is sent.
    * :meth:`commit` sends the acknowledgements (``commit_sync``) and returns, for each
      partition whose acknowledgements were sent, ``"topic:partition"`` -> None when the
      broker applied them, else the error's name (:func:`rdkafka_error_name`:
      ``INVALID_RECORD_STATE``, ``NOT_LEADER_OR_FOLLOWER``, ``REQUEST_TIMED_OUT``, ...); empty
      when none were pending. A commit that fails as a whole raises librdkafka's
      KafkaException (IllegalStateException once closed).
    * :meth:`close` leaves the group (librdkafka commits the acknowledgements still pending
      first); what the member still holds is released by the broker. It never raises, and
      gives up waiting after ``timeout_s`` (the close goes on in its own thread).

    Every call waits at most ``timeout_s`` (``socket.timeout.ms`` is set to it; poll and commit
    take their own timeouts). Not thread-safe, as the client (one thread a member)."""

    kind = "confluent"

    def __init__(self, bootstrap: str, topic: str, group: str, timeout_s: float) -> None:
        from confluent_kafka import ShareConsumer

        self.timeout_s = timeout_s
        self.c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": share_client_id(group),
                                "share.acknowledgement.mode": "explicit", "socket.timeout.ms": int(timeout_s * 1000),
                                "log_level": 2, **rdkafka_debug("share")})
        try:
            self.c.subscribe([topic])
        except BaseException:
            self.close()
            raise

    def poll(self, timeout_s: float) -> list[ShareRec]:
        out = []
        for m in self.c.poll(timeout_s):
            if m.error() is not None:  # an event, not a record (a fatal error raises from poll)
                continue
            count = m.delivery_count()
            out.append(ShareRec(m.topic(), m.partition(), m.offset(), m.value(), -1 if count is None else count))
        return out

    def acknowledge(self, rec: ShareRec, ack_type: str) -> None:
        from confluent_kafka import AcknowledgeType

        if ack_type not in ACK_TYPES:
            raise ValueError(f"ack_type must be one of {', '.join(ACK_TYPES)}, not {ack_type!r}")
        self.c.acknowledge_offset(rec.topic, rec.partition, rec.offset, AcknowledgeType[ack_type.upper()])

    def commit(self) -> dict[str, str | None]:
        results = self.c.commit_sync(self.timeout_s)
        return {f"{tp.topic}:{tp.partition}": None if error is None else rdkafka_error_name(error)
                for tp, error in (results or {}).items()}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            bounded(self.c.close, self.timeout_s)

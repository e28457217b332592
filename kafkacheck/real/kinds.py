"""The client kinds of ``--client``: what drives the cases and what drives the workload.

* :data:`CLIENTS`: the case adapter of each kind (:mod:`~kafkacheck.real.clients` for
  kafka-python and confluent-kafka, :mod:`~kafkacheck.real.java` for Apache Kafka's Java
  client, started only when asked for);
* ``make_*``: the workload's handles of each kind (:mod:`~kafkacheck.real.handles`, or the
  Java ones): a share-group member (KIP-932) for java and confluent only.
"""

from __future__ import annotations

from kafkacheck.real.clients import ConfluentClient, KafkaPythonClient
from kafkacheck.real.handles import GroupMember, Poller, Sender, TxnSender
from kafkacheck.real.share_handles import ShareMember


def _java_client(bootstrap: str, timeout_s: float = 20.0):
    """Apache Kafka's Java client through kafkacheck's driver (kafkacheck.real.java)."""
    from kafkacheck.real.java_clients import JavaClient
    return JavaClient(bootstrap, timeout_s)


CLIENTS = {"kafka-python": KafkaPythonClient, "confluent": ConfluentClient, "java": _java_client}


def make_sender(kind: str, bootstrap: str, timeout_s: float, idempotent: bool):
    if kind == "java":
        from kafkacheck.real.java_clients import JavaSender
        return JavaSender(bootstrap, timeout_s, idempotent)
    return Sender(kind, bootstrap, timeout_s, idempotent)


def make_txn_sender(kind: str, bootstrap: str, txn_id: str, timeout_s: float, bounded: bool = False):
    """``bounded``: no call waits past its timeout (kafka-python's would, and librdkafka's
    send_offsets_to_transaction; the Java client's do not)."""
    if kind == "java":
        from kafkacheck.real.java_clients import JavaTxnSender
        return JavaTxnSender(bootstrap, txn_id, timeout_s)
    return TxnSender(kind, bootstrap, txn_id, timeout_s, bounded)


def make_poller(kind: str, bootstrap: str, tps: list[tuple[str, int]], timeout_s: float,
                isolation: str = "read_uncommitted", group: str | None = None, keyed: bool = False):
    if kind == "java":
        from kafkacheck.real.java_clients import JavaPoller
        return JavaPoller(bootstrap, tps, timeout_s, isolation, group, keyed)
    return Poller(kind, bootstrap, tps, timeout_s, isolation, group, keyed)


def make_member(kind: str, bootstrap: str, topic: str, group: str, timeout_s: float,
                protocol: str = "classic", isolation: str | None = None) -> GroupMember:
    """A member of ``group`` subscribed to ``topic`` with the group ``protocol`` (classic, or
    consumer: KIP-848, which kafka-python does not speak), reading with ``isolation`` (None:
    the client's default)."""
    if kind == "java":
        from kafkacheck.real.java_clients import JavaMember
        return JavaMember(bootstrap, topic, group, timeout_s, protocol, isolation)
    if protocol == "consumer" and kind == "kafka-python":
        raise ValueError("kafka-python has no KIP-848 consumer (group.protocol=consumer)")
    return GroupMember(kind, bootstrap, topic, group, timeout_s, protocol, isolation)


def make_share_member(kind: str, bootstrap: str, topic: str, group: str, timeout_s: float) -> ShareMember:
    """A member of the share group ``group`` (KIP-932) subscribed to ``topic``, in explicit
    acknowledgement mode (:class:`~kafkacheck.real.share_handles.ShareMember`, or the Java
    client's :class:`~kafkacheck.real.java_clients.JavaShareMember` with the same
    interface). Share groups start reading at the latest offset unless the group's
    ``share.auto.offset.reset`` says otherwise: set it first (the case client's
    ``alter_group_configs``)."""
    if kind == "java":
        from kafkacheck.real.java_clients import JavaShareMember
        return JavaShareMember(bootstrap, topic, group, timeout_s)
    if kind == "kafka-python":
        raise ValueError("kafka-python has no share consumer (KIP-932)")
    return ShareMember(bootstrap, topic, group, timeout_s)

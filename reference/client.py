"""What the sans-IO producer and consumer share: bootstrap brokers, correlation ids, and
metadata refresh with backoff.

A client asks one bootstrap broker at a time for metadata (round robin on timeouts), at
most once per ``retry_backoff_ms`` after an answer, so a partition without a leader never
turns into a request storm. Subclasses learn of a newer image through
:meth:`ClientNode._metadata_changed`.
"""

from __future__ import annotations

from typing import ClassVar

from reference.messages import MetadataImage, MetadataRequest, MetadataResponse
from reference.node import Node


class ClientNode(Node):
    CORRELATION_BASE: ClassVar[int] = 0
    coordinator = -1  # the group coordinator, for the consumers
    AWAITING_MAX: ClassVar[int] = 512  # requests remembered for connection_lost (older ones wait for their timeouts)

    def __init__(self, node_id: int, bootstrap: list[int], metadata_timeout_ms: int,
                 retry_backoff_ms: int) -> None:
        super().__init__(node_id)
        if not bootstrap:
            raise ValueError("a client needs at least one bootstrap broker")
        self.bootstrap = bootstrap
        self.metadata = MetadataImage(-1, (), ())
        self._metadata_timeout_ms = metadata_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._corr = self.CORRELATION_BASE
        self._awaiting: dict[object, int] = {}  # a request's timeout timer key -> the node it went to
        self._metadata_corr = -1
        self._metadata_asked = -1
        self._metadata_tries = 0
        self._metadata_not_before_ms = 0
        self._metadata_wait = False
        self._now_ms = 0

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _timeout(self, node: int, delay_ms: float, key: object) -> None:
        """The timeout of a request just sent to ``node``: timer ``key`` in ``delay_ms``, and at
        once if the connection to ``node`` closes first (:meth:`connection_lost`)."""
        self.set_timer(delay_ms, key)
        awaiting = self._awaiting
        awaiting[key] = node
        if len(awaiting) > self.AWAITING_MAX:
            del awaiting[next(iter(awaiting))]

    def expired_by(self, peer: int) -> list:
        """The timer keys that end what was in flight to ``peer``, whose connection closed (a
        reset, a cut, ``peer`` crashed or refused it): every request there failed, as Kafka's
        NetworkClient fails them on a disconnect, and each ends as its timeout would (a
        timeout that finds its request answered already does nothing). A host that embeds
        this client fires them through its own timer routing (with the client's tag)."""
        keys = [k for k, n in self._awaiting.items() if n == peer]
        for k in keys:
            del self._awaiting[k]
        return keys

    def connection_lost(self, now_ms: int, peer: int) -> None:
        self._now_ms = now_ms
        for key in self.expired_by(peer):
            self.timer(now_ms, key)

    def _metadata_changed(self, image: MetadataImage) -> None:
        """Called with every accepted image that is not older than the last one."""

    def _close_coordinator(self) -> None:
        """A request to the coordinator got no answer in time: close the connection (as Kafka's
        NetworkClient does, so that what follows goes on a new one) and look it up again."""
        self.close_connection(self.coordinator)
        self.coordinator = -1

    def _refresh_metadata(self) -> None:
        """Ask a bootstrap broker for metadata, at most once per backoff period."""
        if self._metadata_corr >= 0:
            return
        now_ms = self._now_ms
        if now_ms < self._metadata_not_before_ms:
            if not self._metadata_wait:
                self._metadata_wait = True
                self.set_timer(self._metadata_not_before_ms - now_ms, "metadata-again")
            return
        self._metadata_wait = False
        self._metadata_corr = self._next_corr()
        target = self.bootstrap[self._metadata_tries % len(self.bootstrap)]
        self._metadata_asked = target
        self._metadata_tries += 1
        Node.send(self, target, MetadataRequest(self._metadata_corr))
        self._timeout(target, self._metadata_timeout_ms, ("metadata", self._metadata_corr))

    def _on_metadata_response(self, now_ms: int, message: MetadataResponse) -> bool:
        """Take a metadata answer; False when it is not the one we wait for."""
        if message.correlation_id != self._metadata_corr:
            return False
        self._metadata_corr = -1
        self._metadata_not_before_ms = now_ms + self._retry_backoff_ms
        if message.image.version >= self.metadata.version:
            self.metadata = message.image
            self._metadata_changed(message.image)
        return True

    def _on_metadata_timer(self, key: object) -> bool:
        """Handle the metadata timers; False when the key is not one of them."""
        match key:
            case ("metadata", corr):
                if corr == self._metadata_corr:
                    self._metadata_corr = -1  # no answer in time: ask the next broker
                    self.close_connection(self._metadata_asked)
                    self._refresh_metadata()
            case "metadata-again":
                self._metadata_wait = False
                self._refresh_metadata()
            case _:
                return False
        return True

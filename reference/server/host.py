"""Runs sans-IO nodes on an asyncio event loop in real time.

The simulator's job, done for real: :class:`Host` calls a node's ``start``, ``receive`` and
``timer`` with the wall clock, and routes what the node produced. A :class:`Send` to
another node of this host is delivered on the next turn of the loop (``call_soon``, so
messages between two nodes stay in order); a send to a client connection goes to the
handler the gateway registered for it; a send to a node of another process goes through
the peer links (:mod:`reference.server.peers`). A :class:`Timer` becomes ``call_later``.
Events go to ``on_event`` (the server logs them).

A node that raises is not allowed to take the process down: the error is logged with the
message that caused it, and the node carries on (the engine answers trouble with error
codes, so an exception here is a bug worth a report, not a reason to lose the broker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from reference.errors import UnexpectedInput
from reference.node import Event, Node, Send, Timer

log = logging.getLogger("kafkacheck.server")


def now_ms() -> int:
    return int(time.time() * 1000)


class Host:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or asyncio.get_event_loop()
        self.nodes: dict[int, Node] = {}
        self.clients: dict[int, Callable[[int, Any], None]] = {}
        self.remote: Callable[[int, int, Any], None] | None = None  # (src, dst, message)
        self.on_event: Callable[[int, Event], None] = lambda node_id, event: None
        self.errors = 0
        self._next_client = 1_000_000

    # ------------------------------------------------------------ nodes

    def add(self, node: Node) -> None:
        self.nodes[node.node_id] = node
        self._call(node, "start", node.start, now_ms())

    def _call(self, node: Node, what: str, fn: Callable, *args: Any) -> None:
        try:
            fn(*args)
        except UnexpectedInput as e:  # a peer sent what no handler takes (a stale or forged message)
            log.warning("node %s dropped what it has no handler for: %s", node.node_id, e)
        except Exception:
            self.errors += 1
            log.exception("node %s failed in %s%r", node.node_id, what, args[1:])
        self._route(node)

    def _route(self, node: Node) -> None:
        for out in node.drain():
            if isinstance(out, Send):
                self.deliver(node.node_id, out.dst, out.message)
            elif isinstance(out, Timer):
                self.loop.call_later(max(out.delay_ms, 0) / 1000, self._timer, node, out.key)
            elif isinstance(out, Event):
                self.on_event(node.node_id, out)

    def _timer(self, node: Node, key: Any) -> None:
        if self.nodes.get(node.node_id) is node:
            self._call(node, "timer", node.timer, now_ms(), key)

    def _receive(self, node: Node, src: int, message: Any) -> None:
        if self.nodes.get(node.node_id) is node:
            self._call(node, "receive", node.receive, now_ms(), src, message)

    # ------------------------------------------------------------ routing

    def deliver(self, src: int, dst: int, message: Any) -> None:
        node = self.nodes.get(dst)
        if node is not None:
            self.loop.call_soon(self._receive, node, src, message)
            return
        client = self.clients.get(dst)
        if client is not None:
            client(src, message)
            return
        if self.remote is not None:
            self.remote(src, dst, message)
        # else: the destination is gone (a closed connection): dropped, as a network would

    # ------------------------------------------------------------ client connections

    def register_client(self, handler: Callable[[int, Any], None]) -> int:
        """A node id for a client connection; ``handler(src, message)`` gets its responses."""
        self._next_client += 1
        self.clients[self._next_client] = handler
        return self._next_client

    def unregister_client(self, client_id: int) -> None:
        self.clients.pop(client_id, None)

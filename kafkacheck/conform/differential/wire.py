"""Raw Kafka requests on plain sockets, one version per API (the differential suite's client).

Requests are built and answers decoded with kafka-python's protocol classes (generated from
Kafka's own message schemas); answers come back as plain dicts with bytes left as bytes.
Requests go where a client would send them: :meth:`Wire.leader` and :meth:`Wire.coordinator`
find the broker.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
API_VERSIONS, CREATE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 18, 19, 21, 22
OFFSET_FOR_LEADER_EPOCH, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 23, 24, 25, 26, 28

class WireError(Exception):
    pass


def _frame(request: Any, corr: int) -> bytes:
    request.with_header(correlation_id=corr, client_id="kafkacheck-differential")
    return bytes(request.encode(header=True, framed=True))


class Wire:
    """Raw requests to one cluster, one socket per broker, at fixed versions."""

    def __init__(self, bootstrap: str, versions: dict[int, int], timeout_s: float = 15.0) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.bootstrap = (host, int(port))
        self.versions = versions
        self.timeout_s = timeout_s
        self.sockets: dict[tuple[str, int], socket.socket] = {}
        self.corr = 0

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()
        self.sockets.clear()

    def _socket(self, addr: tuple[str, int]) -> socket.socket:
        s = self.sockets.get(addr)
        if s is None:
            s = self.sockets[addr] = socket.create_connection(addr, timeout=self.timeout_s)
        return s

    def send(self, key: int, values: dict, to: tuple[str, int] | None = None) -> dict:
        """Send one request; its response as a plain dict."""
        from reference.server.protocol import REQUESTS, RESPONSES, build, recv_exact

        if key not in self.versions:
            from reference.server.protocol import API_NAMES

            raise WireError(f"API {API_NAMES.get(key, key)} is not served by both brokers")
        version = self.versions[key]
        addr = to or self.bootstrap
        self.corr += 1
        frame = _frame(build(REQUESTS[key][version], values), self.corr)
        s = self._socket(addr)
        try:
            s.sendall(frame)
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            body = recv_exact(s, size)
        except OSError as e:
            self.sockets.pop(addr, None)
            s.close()
            raise WireError(f"{type(e).__name__} talking to {addr[0]}:{addr[1]}: {e}") from e
        return RESPONSES[key].decode(body, version=version, header=True).to_dict(json=False)

    # ------------------------------------------------------------ routing

    def metadata(self, topics: list[str] | None) -> dict:
        return self.send(METADATA, {"topics": None if topics is None else [{"name": t} for t in topics],
                                    "allow_auto_topic_creation": False})

    def leader(self, topic: str, partition: int = 0) -> tuple[str, int]:
        md = self.metadata([topic])
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        for t in md["topics"]:
            for p in t["partitions"]:
                if t["name"] == topic and p["partition_index"] == partition and p["leader_id"] in brokers:
                    return brokers[p["leader_id"]]
        raise WireError(f"no leader for {topic}:{partition}")

    def coordinator(self, key: str, key_type: int) -> tuple[str, int]:
        """The group (0) or transaction (1) coordinator of ``key``, asked until it is known."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            version = self.versions[FIND_COORDINATOR]
            if version >= 4:
                resp = self.send(FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": [key]})
                c = resp["coordinators"][0]
            else:
                c = self.send(FIND_COORDINATOR, {"key": key, "key_type": key_type})
            if c["error_code"] == 0:
                return c["host"], c["port"]
            if time.monotonic() > deadline:
                raise WireError(f"FindCoordinator({key}) answered error {c['error_code']} for {self.timeout_s:.0f} s")
            time.sleep(0.2)


def common_versions(*servers: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Per API the highest version every server serves and kafka-python encodes."""
    from reference.server.protocol import REQUESTS

    out = {}
    for key in set.intersection(*(set(s) for s in servers)):
        if key not in REQUESTS:
            continue
        low = max(s[key][0] for s in servers)
        high = min([s[key][1] for s in servers] + [REQUESTS[key].max_version])
        if low <= high:
            out[key] = high
    return out



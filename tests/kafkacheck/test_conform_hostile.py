"""kafkacheck conform against brokers that are not usable: one that answers well-framed
garbage, one that answers ApiVersions and nothing else, one that stops answering after the
first requests. Each is exit 2 ("unusable target") in bounded time, one line on stderr, no
traceback, and a partial report."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reference.server.protocol import API_VERSIONS_KEY, SUPPORTED, encode_response, peek_header, recv_exact


class FakeBroker:
    """A TCP server on 127.0.0.1 whose answers ``respond(frame, n)`` decides (bytes to send,
    or None for silence); ``n`` counts the requests of every connection."""

    def __init__(self, respond) -> None:
        self.respond = respond
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.lock = threading.Lock()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                size = int.from_bytes(recv_exact(conn, 4), "big")
                frame = recv_exact(conn, size)
                with self.lock:
                    self.count += 1
                    n = self.count
                out = self.respond(frame, n)
                if out is not None:
                    conn.sendall(out)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def api_versions(frame: bytes) -> bytes | None:
    key, _version, corr = peek_header(frame)
    if key != API_VERSIONS_KEY:
        return None
    return encode_response(API_VERSIONS_KEY, 0, corr, {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(SUPPORTED.items())]})


def garbage(frame: bytes, _n: int) -> bytes:
    _key, _version, corr = peek_header(frame)
    body = corr.to_bytes(4, "big") + os.urandom(7)
    return len(body).to_bytes(4, "big") + body


def conform(port: int, out, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kafkacheck.cli", "conform", "--bootstrap", f"127.0.0.1:{port}",
                        "--workload", "none", "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=300)
    return p, time.monotonic() - start


def assert_unusable(p, out) -> dict:
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    errors = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("kafkacheck: error:"), p.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "unusable" and report["unusable"]
    return report


@pytest.fixture
def broker(request):
    b = FakeBroker(request.param)
    yield b
    b.close()


@pytest.mark.parametrize("broker", [garbage], indirect=True)
def test_well_framed_garbage_is_an_unusable_target(broker, tmp_path):
    p, seconds = conform(broker.port, tmp_path / "r")
    assert_unusable(p, tmp_path / "r")
    assert "not a Kafka response" in p.stderr and seconds < 30


@pytest.mark.parametrize("broker", [lambda frame, n: api_versions(frame)], indirect=True)
def test_a_broker_that_answers_only_api_versions_is_unusable_within_a_minute(broker, tmp_path):
    p, seconds = conform(broker.port, tmp_path / "r", "--timeout", "5")
    report = assert_unusable(p, tmp_path / "r")
    assert "Metadata" in report["unusable"] and seconds < 60


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_a_broker_that_stops_answering_ends_the_run_with_a_partial_report(tmp_path):
    """A reference broker that kafkacheck started, stopped (SIGSTOP) after the first case:
    the case that was running errs, the rest are not run, and the verdict is unusable
    (exit 2) within about a minute, not a list of broker failures."""
    import signal

    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "kafkacheck.cli", "conform", "--spawn", "reference",
                             "--brokers", "1", "--workload", "none", "--timeout", "3", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped: list[int] = []
    try:
        for line in proc.stdout:
            if line.startswith("[1/"):
                break
        stopped = _children(proc.pid)
        assert stopped, "the reference broker process was not found"
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        sent = time.monotonic()
        rest, err = proc.communicate(timeout=120)
        seconds = time.monotonic() - sent
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    p = subprocess.CompletedProcess(proc.args, proc.returncode, rest, err)
    report = assert_unusable(p, out)
    assert seconds < 60 and "stopped answering" in report["unusable"]
    statuses = [e["status"] for e in report["entries"]]
    assert statuses[0] == "pass" and "error" in statuses and statuses[-1] == "skip"
    assert not [pid for pid in stopped if os.path.exists(f"/proc/{pid}") and
                Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"], "a broker process was left running"

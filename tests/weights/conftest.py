"""Shared helpers for the weights tests: the official reference vectors, random initialisation, a local HTTP server."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vitkit.cache import CACHE_ENV

DATA = Path(__file__).resolve().parents[1] / "data" / "official_vit"


def official_io(case: str) -> dict[str, np.ndarray]:
    """Inputs and reference outputs of one official case (NHWC arrays)."""
    with np.load(DATA / f"{case}_io.npz") as data:
        return {k: data[k] for k in data.files}


def nchw(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).permute(0, 3, 1, 2).contiguous()


def max_abs(a: torch.Tensor, b: torch.Tensor | np.ndarray) -> float:
    b = torch.as_tensor(b)
    return (a.detach().float() - b.float()).abs().max().item()


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter random (norm scales around 1, heads and class tokens non-zero), so nothing hides.

    The last GroupNorm of each bottleneck gets scales around 0.1 (the official init has 0): with 1 the random
    residual branches compound and float32 round-off alone reaches ~1e-4 in the hybrid's logits.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_scale = p.ndim == 1 and name.endswith("weight")
            scale = 0.1 if name.endswith(("gn3.weight", "norm3.weight")) else 1.0
            p.copy_(scale * (1 + 0.2 * noise) if is_scale else 0.05 * noise)
    return model.eval()


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


class FileServer(ThreadingHTTPServer):
    """A local HTTP server of `files` (URL path -> bytes, the path as sent, escapes and all) that honours Range
    and If-Range requests (each version's ETag is its sha256), records every request, and injects faults: a
    response dropped midway (`drop_once`, then the file replaced by `then_serve`'s version), late answers
    (`delay_s`), a 206 for another range than asked (`wrong_range`), no Content-Length with an early close
    (`no_length`), a 200 HTML error page (`html`), a trickle of `trickle_bytes` every `trickle_s`, and a stall
    of `stall_s` after half the body (`stall_once`)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FileHandler)
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.headers_seen: list[dict[str, str]] = []
        self.drop_once: set[str] = set()
        self.then_serve: dict[str, bytes] = {}
        self.delay_s = 0.0
        self.ranges = True  # False: answer a Range request with the whole file, as some servers do
        self.etags = True  # False: no ETag, so nothing names the version a resume continues
        self.if_range = True  # False: a 206 whatever If-Range says (the reply's own ETag tells the truth)
        self.wrong_range: set[str] = set()
        self.no_length: set[str] = set()
        self.html: set[str] = set()
        self.trickle_s, self.trickle_bytes = 0.0, 1
        self.stall_once: set[str] = set()
        self.stall_s = 0.0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up on a trickle or a stall: its broken pipe is expected


def etag(data: bytes) -> str:
    return f'"{hashlib.sha256(data).hexdigest()[:16]}"'


class _FileHandler(BaseHTTPRequestHandler):
    server: FileServer

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        server = self.server
        ranged = self.headers.get("Range")
        server.requests.append((self.path, ranged))
        server.headers_seen.append(dict(self.headers))
        time.sleep(server.delay_s)
        data = server.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        if self.path in server.html:
            self.reply(
                200,
                b"<html><body>Service temporarily unavailable</body></html>",
                {"Content-Type": "text/html"},
            )
            return
        stale = server.if_range and self.headers.get("If-Range") not in (None, etag(data))
        ranged = ranged if server.ranges and not stale else None
        start = int(ranged.removeprefix("bytes=").rstrip("-")) if ranged else 0
        if start >= len(data) > 0:
            self.send_error(416)
            return
        headers = {"ETag": etag(data)} if server.etags else {}
        shown = 0 if self.path in server.wrong_range else start  # the range it claims (and sends)
        if ranged:
            headers["Content-Range"] = f"bytes {shown}-{len(data) - 1}/{len(data)}"
        self.reply(206 if ranged else 200, data[shown:], headers)

    def reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        server = self.server
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if self.path not in server.no_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        half = len(body) // 2
        if self.path in server.drop_once or self.path in server.no_length:  # half the body, then it closes
            server.drop_once.discard(self.path)
            self.wfile.write(body[:half])
            if self.path in server.then_serve:
                server.files[self.path] = server.then_serve.pop(self.path)
            self.close_connection = True
        elif self.path in server.stall_once:
            server.stall_once.discard(self.path)
            self.wfile.write(body[:half])
            self.wfile.flush()
            time.sleep(server.stall_s)
            self.wfile.write(body[half:])
        elif server.trickle_s:
            for at in range(0, len(body), server.trickle_bytes):
                self.wfile.write(body[at : at + server.trickle_bytes])
                self.wfile.flush()
                time.sleep(server.trickle_s)
        else:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def file_server(monkeypatch, tmp_path):
    """A new server with a new cache: the cache names files by URL, and a port is reused by later servers."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    server = FileServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _deadline(deadline) -> None:
    """Every test here under a deadline (tests/deadline.py): a download test that blocks fails."""

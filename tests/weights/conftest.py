"""Shared helpers for the weights tests: the official reference vectors, random initialisation, a local HTTP server."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

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
    """A local HTTP server of `files` (URL path -> bytes) that honours Range requests, records every request,
    and on demand drops a response midway (`drop_once`) or answers late (`delay_s`)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FileHandler)
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.drop_once: set[str] = set()
        self.delay_s = 0.0
        self.ranges = True  # False: answer a Range request with the whole file, as some servers do

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _FileHandler(BaseHTTPRequestHandler):
    server: FileServer

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        ranged = self.headers.get("Range")
        self.server.requests.append((self.path, ranged))
        time.sleep(self.server.delay_s)
        data = self.server.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        ranged = ranged if self.server.ranges else None
        start = int(ranged.removeprefix("bytes=").rstrip("-")) if ranged else 0
        if start >= len(data) > 0:
            self.send_error(416)
            return
        body = data[start:]
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path in self.server.drop_once:  # half the body, then the connection closes
            self.server.drop_once.discard(self.path)
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def file_server():
    server = FileServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()

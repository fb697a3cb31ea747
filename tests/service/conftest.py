"""A real server on a free port of 127.0.0.1 for the API tests: uvicorn in a thread of the test process (fast),
or `vitkit serve` in its own process (signals, memory); both answer real HTTP requests."""

from __future__ import annotations

import contextlib
import io
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests
import torch
from PIL import Image

import vitkit
from tiny import build_tiny_vit
from vitkit.service import ServiceOptions, asgi_app, load_served_model
from vitkit.service.app import Service
from vitkit.service.served_model import ServedModel
from vitkit.service.server import address, bind, server

CLASSES = ["cat", "dog", "bird"]
DEADLINE = 30.0  # seconds any server start or stop may take before the test fails


@dataclass
class Served:
    url: str
    service: Service


def photo(seed: int, size: tuple[int, int] = (48, 64), fmt: str = "PNG") -> bytes:
    """An RGB photo of random pixels, encoded."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


def wait_ready(url: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with contextlib.suppress(requests.ConnectionError):
            if requests.get(f"{url}/ready", timeout=5).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready within {deadline} s")


@contextlib.contextmanager
def running(model: ServedModel, options: ServiceOptions) -> Iterator[Served]:
    """The service on a free port, in a thread; stopped (uvicorn's graceful shutdown) afterwards."""
    app, service = asgi_app(model, options)
    sock = bind("127.0.0.1", 0)
    url = address(sock)
    uvicorn_server = server(app, options.connections, service.metrics.connection)
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_ready(url)
        yield Served(url, service)
    finally:
        uvicorn_server.should_exit = True
        thread.join(DEADLINE)
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture(scope="session")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ViT (16 px RGB, 3 named classes, a random head so that images differ) saved with save_pretrained."""
    torch.manual_seed(0)
    model = build_tiny_vit(num_classes=len(CLASSES))
    torch.nn.init.normal_(model.head.weight, std=2.0)
    model.class_names = CLASSES
    directory = tmp_path_factory.mktemp("served") / "tiny"
    vitkit.save_pretrained(model, directory)
    return directory


@pytest.fixture(scope="module")
def served(weights_dir: Path) -> Iterator[Served]:
    """The tiny model in fp32 (its answers comparable with the model's own), batching on."""
    model = load_served_model(str(weights_dir), device="cpu", precision="fp32")
    with running(model, ServiceOptions(max_batch=8, max_wait_ms=50, max_upload_bytes=2**20)) as s:
        yield s


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str
    stderr: list[str]  # its lines so far, read by a thread so that the pipe never fills


@contextlib.contextmanager
def serve_process(*args: str) -> Iterator[ServerProcess]:
    """`vitkit serve ARGS --port 0` in its own process, its URL read from its first line; killed if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "vitkit.cli", "serve", *args, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert found, f"no address in {line!r}"
        threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True).start()
        wait_ready(found.group(0), deadline=120)  # a cold process imports torch and FastAPI first
        yield ServerProcess(process, found.group(0), lines)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(DEADLINE)

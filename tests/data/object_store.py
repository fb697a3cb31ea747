"""Servers for the remote-shard tests, on 127.0.0.1 only: the S3 server of `moto` (MinIO is in no registry the
tests can install from: Debian does not package it) in a process of its own, and an HTTP server in a thread that
serves byte ranges and injects faults (resets, 503s, stalls, short bodies) into the GETs of the files named, and
answers 403 for the files it forbids."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

SECRET = "vitkit-sentinel-secret-5f3a9c"  # must never appear in a run directory, a log or a message
BUCKET = "collections"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_moto(log: IO[bytes], deadline: float) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a port of the kernel's choice (no other process can take it between a probe and the
    bind), answering; (the process, its endpoint, read from the line it writes to `log`)."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    until = time.monotonic() + deadline
    while server.poll() is None and time.monotonic() < until:
        log.seek(0)
        running = re.search(rb"Running on (http://127\.0\.0\.1:\d+)", log.read())
        try:
            if running:
                endpoint = running[1].decode()
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                return server, endpoint
        except OSError:
            pass
        time.sleep(0.1)
    server.terminate()
    server.wait(timeout=30)
    pytest.fail(f"moto's S3 server did not answer within {deadline} s (exit code {server.poll()})")


@contextlib.contextmanager
def s3_server(deadline: float = 60) -> Iterator[dict[str, str]]:
    """moto's S3 server with one bucket; yields the environment that points S3 clients at it (the standard
    variables, as for any S3-compatible store), with SECRET as the secret key."""
    with tempfile.TemporaryFile() as log:
        server, endpoint = start_moto(log, deadline)
        try:
            env = {
                "AWS_ACCESS_KEY_ID": "vitkit-test",
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_DEFAULT_REGION": "us-east-1",
            }
            with pytest.MonkeyPatch.context() as patch:
                for name, value in env.items():
                    patch.setenv(name, value)
                patch.delenv("AWS_PROFILE", raising=False)
                clear_clients()
                fsspec.filesystem("s3").mkdir(BUCKET)
                yield env
                clear_clients()
        finally:
            server.terminate()
            server.wait(timeout=30)


def clear_clients() -> None:
    """Forget fsspec's cached S3 clients, which keep the endpoint they were made with."""
    fsspec.get_filesystem_class("s3").clear_instance_cache()


def upload(directory: Path, url: str) -> str:
    """Every file under `directory` copied to `url` (same relative names)."""
    fs, root = fsspec.core.url_to_fs(url)
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{root}/{path.relative_to(directory).as_posix()}")
    return url


class FaultyFiles(http.server.ThreadingHTTPServer):
    """Serves `files` (name -> bytes) with Content-Length, ETag and byte ranges; GETs of a name take the next
    fault of `faults[name]` (an iterator of 'reset', '503', 'stall', 'short': half the body, then the connection
    closed; None: serve) while it has one. `gets` and `ranges` record each GET's name and Range header; the names
    in `forbidden` are answered 403."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, stall_seconds: float = 3.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, Iterator[str | None]] = {}
        self.gets: list[str] = []
        self.ranges: list[str] = []
        self.forbidden: set[str] = set()
        self.stall_seconds = stall_seconds

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def faulty_http(stall_seconds: float = 3.0) -> Iterator[FaultyFiles]:
    server = FaultyFiles(stall_seconds)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FaultyFiles
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self) -> bytes | None:
        name = self.path.lstrip("/")
        data = None if name in self.server.forbidden else self.server.files.get(name)
        if data is None:
            self.send_response(403 if name in self.server.forbidden else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        return data

    def _headers(self, status: int, data: bytes, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", f'"{hashlib.md5(data).hexdigest()}"')
        self.send_header("Accept-Ranges", "bytes")

    def do_HEAD(self) -> None:
        data = self._body()
        if data is not None:
            self._headers(200, data, len(data))
            self.end_headers()

    def do_GET(self) -> None:
        name = self.path.lstrip("/")
        data = self._body()
        if data is None:
            return
        self.server.gets.append(name)
        self.server.ranges.append(self.headers.get("Range", ""))
        fault = next(self.server.faults.get(name, iter(())), None)
        start, end = 0, len(data)
        ranged = self.headers.get("Range", "").removeprefix("bytes=")
        if ranged:
            first, _, last = ranged.partition("-")
            start, end = int(first), min(int(last) + 1 if last else len(data), len(data))
        part = data[start:end]
        if fault == "reset":  # RST: linger 0, then close
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if fault == "503":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "stall":
            time.sleep(self.server.stall_seconds)
            self.close_connection = True
            return
        self._headers(206 if ranged else 200, data, len(part))
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if fault == "short":
            self.wfile.write(part[: len(part) // 2])
            self.close_connection = True
            return
        self.wfile.write(part)


def files_of(directory: Path) -> dict[str, bytes]:
    """name relative to `directory` -> bytes, for FaultyFiles.files."""
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }

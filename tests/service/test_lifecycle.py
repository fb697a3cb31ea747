"""`vitkit serve` as a process: a run's class names over HTTP, a hostile set of requests with its memory bounded,
and SIGTERM or Ctrl-C under load (every request in progress answered, exit 0 within 10 s), damaged exports."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import requests

from service.conftest import photo, serve_process
from service.test_api import TIMEOUT, post, truncated_jpeg
from vitkit.service.server import STOP_SECONDS

pytestmark = pytest.mark.slow


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


def test_serve_a_run_answers_with_its_class_names(photo_run: Path) -> None:
    classes = sorted(p.name for p in (photo_run.parent / "photos" / "test").iterdir())
    image = next((photo_run.parent / "photos" / "test" / classes[0]).iterdir()).read_bytes()
    with serve_process(str(photo_run)) as server:
        answer = post(server.url, image).json()
    assert answer["model"]["name"] == "run"
    assert len(answer["predictions"]) == 5
    assert {p["class"] for p in answer["predictions"]} <= set(classes)


def raw_exchange(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send a request by hand and read what comes back until the server closes or 2 s pass."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as connection:
        connection.sendall(head + body)
        connection.settimeout(2)
        reply = b""
        try:
            while chunk := connection.recv(65536):
                reply += chunk
        except TimeoutError:
            pass
    return reply


def test_a_hostile_set_gets_4xx_or_503_memory_stays_bounded_and_good_requests_pass(weights_dir: Path) -> None:
    from data.test_decode import png_bomb

    with serve_process(str(weights_dir), "--max-upload-mb", "8", "--max-connections", "64") as server:
        url, pid = server.url, server.process.pid
        assert post(url, photo(0)).status_code == 200
        start_rss = rss_mib(pid)
        statuses = [
            post(url, b"\x00" * 1000).status_code,
            post(url, truncated_jpeg(), "image/jpeg").status_code,
            post(url, png_bomb(20000, 20000)).status_code,
            post(url, b"<html></html>", "text/html").status_code,
        ]
        assert statuses == [400, 400, 400, 415]
        fifty_mb = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 52428800\r\n\r\n"
        assert raw_exchange(url, fifty_mb, b"z" * 65536).startswith(b"HTTP/1.1 413")
        # 1,000 requests from clients that never read their answers: 10 connections, 100 pipelined each
        request = (
            b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
            + f"Content-Length: {len(photo(1))}\r\n\r\n".encode()
            + photo(1)
        )
        silent = [
            socket.create_connection(url.removeprefix("http://").split(":"), timeout=TIMEOUT)
            for _ in range(10)
        ]
        try:
            for connection in silent:
                connection.settimeout(5)
                try:
                    connection.sendall(request * 100)
                except TimeoutError:  # the server stopped reading: its buffers are full, as they should be
                    pass
            assert post(url, photo(2)).status_code == 200  # still answering others
            assert rss_mib(pid) - start_rss < 300
        finally:
            for connection in silent:
                connection.close()
        assert post(url, photo(3)).status_code == 200
        assert rss_mib(pid) - start_rss < 300


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_under_load_answers_every_request_in_progress_and_exits_0_within_10_s(
    weights_dir: Path, sent: signal.Signals
) -> None:
    with serve_process(str(weights_dir), "--max-batch", "4") as server:
        outcomes: list[tuple[float, float, int | str]] = []  # (sent, done, status or error)
        stop = threading.Event()

        def client(seed: int) -> None:
            body = photo(seed)
            with requests.Session() as session:
                while not stop.is_set():
                    sent = time.monotonic()
                    try:
                        status: int | str = session.post(
                            f"{server.url}/predict",
                            data=body,
                            headers={"Content-Type": "image/png"},
                            timeout=TIMEOUT,
                        ).status_code
                    except requests.ConnectionError as error:
                        status = type(error).__name__
                    outcomes.append((sent, time.monotonic(), status))
                    if isinstance(status, str):
                        return

        clients = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for thread in clients:
            thread.start()
        loaded = time.monotonic() + 30  # under load: 16 answers at least, however slow the machine is today
        while len(outcomes) < 16 and time.monotonic() < loaded:
            time.sleep(0.05)
        time.sleep(0.6)  # more requests sent, some in progress
        terminated = time.monotonic()
        server.process.send_signal(sent)
        code = server.process.wait(STOP_SECONDS)
        exited = time.monotonic() - terminated
        stop.set()
        for thread in clients:
            thread.join(TIMEOUT)
    assert code == 0 and exited < STOP_SECONDS
    # Sent half a second before SIGTERM: read by the server by then, even with 8 client threads on a loaded CPU
    # (one not read yet is an idle connection to uvicorn's shutdown, closed unanswered).
    before = [status for sent, _, status in outcomes if sent < terminated - 0.5]
    assert len(before) > 8 and all(status == 200 for status in before), before
    assert all(status in (200, "ConnectionError") for _, _, status in outcomes)
    time.sleep(0.2)  # the stderr reader thread takes the last lines
    closing = "".join(server.stderr)
    answered = int(re.search(rf"stopped by {sent.name}; (\d+) requests answered", closing).group(1))
    assert answered >= sum(status == 200 for _, _, status in outcomes)


def damaged_exports(directory: Path) -> list[Path]:
    """An .onnx that is not a protobuf, an .onnx cut short, and a .pt2 program cut in half (a zip without its
    central directory)."""
    garbage, cut, program = directory / "garbage.onnx", directory / "cut.onnx", directory / "cut.pt2"
    garbage.write_bytes(b"\x08\x07\x12\xff" + bytes(range(256)) * 4)
    cut.write_bytes(b"\x08\x07\x12\x0cpytorch 2.14\x3a\xa0\x9c\x01\x0a")
    with zipfile.ZipFile(directory / "whole.pt2", "w") as archive:
        archive.writestr("archive/data/weights", bytes(4096))
        archive.writestr("archive/extra/vitkit.json", "{}")
    whole = (directory / "whole.pt2").read_bytes()
    program.write_bytes(whole[: len(whole) // 2])
    return [garbage, cut, program]


def test_a_damaged_export_is_exit_2_and_one_line_naming_it(tmp_path: Path) -> None:
    paths = damaged_exports(tmp_path)
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "vitkit.cli", "serve", str(path), "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in paths
    ]
    for path, process in zip(paths, started, strict=True):
        _, stderr = process.communicate(timeout=120)
        lines = stderr.strip().splitlines()
        assert process.returncode == 2 and len(lines) == 1, stderr
        assert lines[0].startswith(f"vitkit serve: error: {path}: "), lines

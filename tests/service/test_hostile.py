"""Hostile clients against a real server (in a thread, with short bounds so that each case takes a second or two):
slow and idle connections are closed within their bounds without taking room from good requests, the connection
counts hold, a client gone mid-body is a 499 and one log line, a truncated PNG is a 400, the pixels in flight are
bounded."""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from service.conftest import Served, photo, running
from service.test_api import TIMEOUT, post
from vitkit.service import ServiceOptions, load_served_model
from vitkit.service.connections import ConnectionLimits
from vitkit.service.limits import RequestRefused
from vitkit.service.pixels import PixelBudget
from vitkit.service.truncation import ADAM7, declared_bytes, png_shortfall

HEAD_TIMEOUT = 0.6
KEEP_ALIVE = 0.6
GRACE = 0.6


@pytest.fixture(scope="module")
def bounded(weights_dir: Path) -> Iterator[Served]:
    """The tiny model behind short bounds: 0.6 s for a head, 0.6 s idle, a body at 8 KiB/s after 0.6 s, 6
    connections from one address, 10 in all."""
    model = load_served_model(str(weights_dir), device="cpu", precision="fp32")
    options = ServiceOptions(
        read_timeout_s=5,
        min_body_rate=8192,
        body_grace_s=GRACE,
        connections=ConnectionLimits(
            head_timeout_s=HEAD_TIMEOUT, keep_alive_s=KEEP_ALIVE, max_connections=10, max_per_client=6
        ),
    )
    with running(model, options) as s:
        yield s


def connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=TIMEOUT, source_address=(source, 0))


def read_until_closed(connection: socket.socket, limit_s: float = TIMEOUT) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    start = time.monotonic()
    connection.settimeout(limit_s)
    reply = b""
    try:
        while chunk := connection.recv(65536):
            reply += chunk
    except ConnectionResetError:
        pass
    return reply, time.monotonic() - start


def metrics(url: str) -> dict:
    return requests.get(f"{url}/metrics", timeout=TIMEOUT).json()


def request_head(length: int) -> bytes:
    return (
        f"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_slow_head_gets_408_and_an_idle_connection_is_dropped_within_the_head_timeout(
    bounded: Served,
) -> None:
    slow, idle = connect(bounded.url), connect(bounded.url)
    with slow, idle:
        slow.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert post(bounded.url, photo(1)).status_code == 200  # meanwhile
        reply, waited = read_until_closed(slow)
        assert reply.startswith(b"HTTP/1.1 408") and b"request head did not arrive within 0.6 s" in reply
        silence, idle_for = read_until_closed(idle)
    assert silence == b"" and waited < HEAD_TIMEOUT + 2 and idle_for < HEAD_TIMEOUT + 2
    closed = metrics(bounded.url)["connections_closed"]
    assert closed["head_timeout_408"] >= 1 and closed["idle_timeout"] >= 1


def test_a_head_trickled_after_an_answer_is_still_bounded(bounded: Served) -> None:
    """The keep-alive timer stops at the next request's first byte; the head deadline starts there."""
    with connect(bounded.url) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while b'"alive"}' not in answer:  # its head and body may come apart
            answer += connection.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200")
        start = time.monotonic()
        connection.sendall(b"G")
        for byte in b"ET /health HTTP/1.1\r\n":  # one byte every 0.2 s: never finished in time
            try:
                connection.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.2)
            if time.monotonic() - start > HEAD_TIMEOUT + 1.5:
                break
        reply, _ = read_until_closed(connection)
    assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - start < HEAD_TIMEOUT + 3


def test_an_idle_keep_alive_connection_is_closed(bounded: Served) -> None:
    with connect(bounded.url) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer, idle_for = read_until_closed(connection)
    assert answer.startswith(b"HTTP/1.1 200") and idle_for < KEEP_ALIVE + 2


def test_a_trickling_body_gets_408_after_the_grace_however_its_bytes_are_spaced(bounded: Served) -> None:
    with connect(bounded.url) as slow:
        slow.sendall(request_head(5000))
        start = time.monotonic()
        reply = b""
        slow.settimeout(0.1)
        while (
            b"KiB/s" not in reply and time.monotonic() - start < 5
        ):  # one byte per 0.1 s: each read is quick
            try:
                slow.sendall(b"x")
                reply += slow.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
        took = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408") and b"arrived too slowly" in reply, reply
    assert b"connection: close" in reply.lower()
    assert GRACE - 0.1 < took < GRACE + 2  # the schedule allows 8 KiB/s x (t - 0.6 s), far above 10 bytes/s


def test_slow_uploads_take_no_image_slot(weights_dir: Path) -> None:
    """Two uploads trickling against a service with room for one image in progress: a good request is served."""
    model = load_served_model(str(weights_dir), device="cpu", precision="fp32")
    with running(model, ServiceOptions(max_queue=1, read_timeout_s=20)) as s:
        slow = [connect(s.url) for _ in range(2)]
        try:
            for connection in slow:
                connection.sendall(request_head(5000) + b"abc")
            time.sleep(0.2)
            assert post(s.url, photo(4)).status_code == 200
        finally:
            for connection in slow:
                connection.close()


def test_an_answer_sent_before_the_body_was_read_closes_the_connection(bounded: Served) -> None:
    with connect(bounded.url) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
        reply, took = read_until_closed(connection)
    assert reply.startswith(b"HTTP/1.1 200") and took < 2
    assert metrics(bounded.url)["connections_closed"]["closed_body_unread"] >= 1


def test_one_client_address_holds_at_most_its_share_and_the_oldest_idle_one_makes_room(
    bounded: Served,
) -> None:
    idle = [connect(bounded.url, "127.0.0.2") for _ in range(6)]
    evicted_before = metrics(bounded.url)["connections_closed"].get("evicted", 0)
    try:
        with connect(bounded.url, "127.0.0.2") as seventh:
            seventh.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert seventh.recv(4096).startswith(b"HTTP/1.1 200")  # in, in place of the oldest idle one
        assert read_until_closed(idle[0], 2)[0] == b""
        assert metrics(bounded.url)["connections_closed"]["evicted"] == evicted_before + 1
    finally:
        for connection in idle:
            connection.close()


def test_connections_busy_with_requests_are_not_evicted_and_other_addresses_still_get_in(
    bounded: Served,
) -> None:
    busy = [connect(bounded.url, "127.0.0.3") for _ in range(6)]
    try:
        for connection in busy:  # in their body, quickly enough for the schedule: busy, never evicted
            connection.sendall(request_head(40000) + b"x" * 6000)
        time.sleep(0.1)
        with connect(bounded.url, "127.0.0.3") as seventh:
            assert read_until_closed(seventh, 2)[0] == b""  # dropped at once: no room at its address
        assert post(bounded.url, photo(2)).status_code == 200  # another address is served
        assert metrics(bounded.url)["connections_closed"]["refused_client_full"] >= 1
    finally:
        for connection in busy:
            connection.close()


def test_a_full_server_evicts_the_oldest_idle_connection_for_a_good_request(bounded: Served) -> None:
    idle = [connect(bounded.url, f"127.0.0.{4 + i // 5}") for i in range(10)]  # 10 of 10, 5 per address
    try:
        time.sleep(0.1)
        assert post(bounded.url, photo(3)).status_code == 200
        assert read_until_closed(idle[0], 2)[0] == b""
    finally:
        for connection in idle:
            connection.close()


def test_a_client_gone_mid_body_is_a_499_and_one_log_line(
    bounded: Served, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        with connect(bounded.url) as connection:
            connection.sendall(request_head(100000) + b"x" * 1000)
            time.sleep(0.2)
        deadline = time.monotonic() + 5
        while (
            "499" not in metrics(bounded.url)["requests"].get("/predict", {}) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
    counts = metrics(bounded.url)["requests"]["/predict"]
    assert counts["499"] >= 1 and "500" not in counts
    gone = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(gone) == 1 and "after 1,000 of 100,000 body bytes" in gone[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or "Exception in ASGI" in r.getMessage()]


def png(width: int, height: int, rows: bytes, interlace: int = 0) -> bytes:
    """An 8-bit RGB PNG holding the inflated image data `rows` (filter bytes included)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, interlace)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def test_a_png_declaring_9000x9000_with_10_rows_is_a_400_naming_it(bounded: Served) -> None:
    data = png(9000, 9000, (b"\x00" + b"\x7f" * 27000) * 10)
    assert len(data) < 1000
    response = post(bounded.url, data)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (
        error.startswith("request body: truncated PNG: declares 9000x9000")
        and "10 of its 9,000 rows" in error
    )


def interlaced_white(width: int, height: int, drop_last_row: bool) -> bytes:
    rows = b""
    for x0, y0, dx, dy in ADAM7:
        columns, count = max(0, -(-(width - x0) // dx)), max(0, -(-(height - y0) // dy))
        if columns and count:
            rows += (b"\x00" + b"\xff" * 3 * columns) * count
    return png(width, height, rows[: -(1 + 3 * width)] if drop_last_row else rows, interlace=1)


def test_the_interlaced_row_count_is_exactly_what_pillow_needs() -> None:
    """All-white rows: Pillow fills what is missing with zeros, so a count one row short must show a zero."""
    width, height = 13, 11
    whole = interlaced_white(width, height, drop_last_row=False)
    assert len(zlib.decompress(whole[33 + 8 : -12 - 4])) == declared_bytes(width, height, 24, True)
    assert np.asarray(Image.open(io.BytesIO(whole)).convert("RGB")).min() == 255
    assert png_shortfall(whole, "w.png") is None
    short = interlaced_white(width, height, drop_last_row=True)
    assert np.asarray(Image.open(io.BytesIO(short)).convert("RGB")).min() == 0
    assert "truncated PNG" in (png_shortfall(short, "s.png") or "")


def test_the_pixels_in_flight_wait_for_room_then_503() -> None:
    async def scenario() -> list[str]:
        budget = PixelBudget(100, wait_s=0.3)
        events: list[str] = []

        async def take(name: str, pixels: int, hold_s: float) -> None:
            try:
                async with budget.hold(pixels):
                    events.append(f"{name} in ({budget.in_flight})")
                    await asyncio.sleep(hold_s)
            except RequestRefused as refused:
                events.append(f"{name} {refused.status}")

        first = asyncio.create_task(take("a", 60, 0.15))
        await asyncio.sleep(0.01)
        await asyncio.gather(first, take("b", 60, 0), take("c", 100, 0))
        blocker = asyncio.create_task(take("d", 100, 1.0))
        await asyncio.sleep(0.01)
        await take("e", 1, 0)
        await blocker
        return events

    events = asyncio.run(scenario())
    assert events[0] == "a in (60)" and set(events[1:3]) == {"b in (60)", "c in (100)"}
    assert events[3:] == ["d in (100)", "e 503"]

"""`vitkit serve` with its default connection bounds under a siege: 256 slow-body, 256 slow-head and 1,000 idle
connections, each reopened a second after the server closes it, beside a client sending one good request a second
(SERVING.md, "Limits"). And 24 legal 9000 x 9000 PNGs from 8 clients against the pixels-in-flight bound.

The hostile connections come from 127.0.0.2-127.0.0.25 (all of 127/8 is this machine) and the good client from
127.0.0.1, every one of them to the server on 127.0.0.1: a client address holds at most 64 connections, so the
hostile ones are spread over addresses as a crowd of clients would be, and together they pass the 1,024 open
connections the server keeps."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import selectors
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from service.conftest import photo, serve_process
from service.test_hostile import png
from vitkit.service.server import STOP_SECONDS

pytestmark = pytest.mark.slow

SIEGE_SECONDS = float(os.environ.get("VITKIT_SIEGE_SECONDS", 60))  # CI runs the documented 60 s
SLACK_S = 5.0  # a loaded 2-vCPU machine: accepts and timers run late, the test's own loop notices late
HEAD_TIMEOUT, GRACE, MIN_RATE, READ_TIMEOUT = 10.0, 5.0, 1024.0, 30.0  # the defaults of `vitkit serve`
FILES_NEEDED = 1512 + 256


def status_kib(pid: int, key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1))


@contextlib.contextmanager
def enough_files(needed: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"{needed} open files needed, the hard limit is {hard} (ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@dataclass
class Hostile:
    """One hostile connection slot: its kind, its socket, when it opened, what it sent and received."""

    kind: str  # "body", "head" or "idle"
    source: str
    connection: socket.socket | None = None
    opened: float = 0.0
    next_byte: float = 0.0
    sent: int = 0
    reply: bytes = b""
    reopen_at: float = 0.0


@dataclass
class Siege:
    """Keeps every slot's connection open (reopening it 1 s after the server closes it) and records how long each
    closed connection lived."""

    host: str
    port: int
    slots: list[Hostile]
    lifetimes: dict[str, list[tuple[float, bool, int]]] = field(
        default_factory=dict
    )  # kind -> (s, 408?, sent)
    refused_connects: int = 0
    selector: selectors.DefaultSelector = field(default_factory=selectors.DefaultSelector)

    def open(self, slot: Hostile, now: float) -> None:
        try:
            connection = socket.create_connection(
                (self.host, self.port), timeout=2, source_address=(slot.source, 0)
            )
        except OSError:
            self.refused_connects += 1
            slot.reopen_at = now + 1
            return
        connection.setblocking(False)
        slot.connection, slot.opened, slot.sent, slot.reply = connection, now, 0, b""
        slot.next_byte = now
        if slot.kind == "body":
            head = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 100000\r\n\r\n"
            connection.send(head)
            slot.next_byte = now + 1
        elif slot.kind == "head":
            connection.send(b"POST /predict HTTP/1.1\r\n")
            slot.next_byte = now + 1
        self.selector.register(connection, selectors.EVENT_READ, slot)

    def closed(self, slot: Hostile, now: float) -> None:
        assert slot.connection is not None
        self.selector.unregister(slot.connection)
        slot.connection.close()
        slot.connection = None
        self.lifetimes.setdefault(slot.kind, []).append(
            (now - slot.opened, slot.reply.startswith(b"HTTP/1.1 408"), slot.sent)
        )
        slot.reopen_at = now + 1

    def run(self, seconds: float) -> list[float]:
        """Until `seconds` have passed; the ages of the connections still open at the end."""
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            for key, _ in self.selector.select(timeout=0.05):
                slot = key.data
                try:
                    chunk = slot.connection.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    slot.reply += chunk
                else:
                    self.closed(slot, time.monotonic())
            now = time.monotonic()
            for slot in self.slots:
                if slot.connection is None:
                    if now >= slot.reopen_at:
                        self.open(slot, now)
                elif slot.kind != "idle" and now >= slot.next_byte:
                    with contextlib.suppress(OSError):
                        slot.sent += slot.connection.send(b"x" if slot.kind == "body" else b"X")
                    slot.next_byte = now + 1
        return [time.monotonic() - s.opened for s in self.slots if s.connection is not None]

    def close(self) -> None:
        for slot in self.slots:
            if slot.connection is not None:
                slot.connection.close()


def good_requests(url: str, seconds: float, outcomes: list[tuple[float, int | str]]) -> None:
    """One request a second on a new connection from 127.0.0.1: (seconds to the answer, status or error)."""
    end = time.monotonic() + seconds
    body = photo(7)
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            status: int | str = requests.post(
                f"{url}/predict", data=body, headers={"Content-Type": "image/png"}, timeout=10
            ).status_code
        except requests.RequestException as error:
            status = type(error).__name__
        outcomes.append((time.monotonic() - start, status))
        time.sleep(max(0.0, 1 - (time.monotonic() - start)))


def test_a_siege_of_slow_and_idle_connections_leaves_good_requests_answered(weights_dir: Path) -> None:
    with (
        enough_files(FILES_NEEDED + 512),
        serve_process(
            str(weights_dir),
            "--precision",
            "fp32",
            "--max-pixels",
            "1000000",
            "--max-pixels-in-flight",
            "1000000",
        ) as server,
    ):
        host, port = server.url.removeprefix("http://").split(":")
        pid = server.process.pid
        start_rss = status_kib(pid, "VmRSS") / 1024
        slots = (
            [Hostile("body", f"127.0.0.{2 + i // 64}") for i in range(256)]
            + [Hostile("head", f"127.0.0.{6 + i // 64}") for i in range(256)]
            + [Hostile("idle", f"127.0.0.{10 + i // 63}") for i in range(1000)]
        )
        siege = Siege(host, int(port), slots)
        outcomes: list[tuple[float, int | str]] = []
        peak_rss = [start_rss]
        stop = threading.Event()

        def watch_memory() -> None:
            while not stop.wait(0.5):
                peak_rss.append(status_kib(pid, "VmRSS") / 1024)

        watcher = threading.Thread(target=watch_memory, daemon=True)
        good = threading.Thread(target=good_requests, args=(server.url, SIEGE_SECONDS, outcomes), daemon=True)
        watcher.start()
        time.sleep(0.5)
        good.start()
        still_open = siege.run(SIEGE_SECONDS)
        good.join(15)
        stop.set()
        watcher.join(5)
        try:
            metrics = requests.get(f"{server.url}/metrics", timeout=10).json()
            assert requests.post(
                f"{server.url}/predict", data=photo(8), headers={"Content-Type": "image/png"}, timeout=10
            ).ok
            interrupted = time.monotonic()  # Ctrl-C with the hostile connections still open
            server.process.send_signal(signal.SIGINT)
            code = server.process.wait(STOP_SECONDS + 5)
            stopped_in = time.monotonic() - interrupted
        finally:
            siege.close()

    answered = sorted(seconds for seconds, status in outcomes if status == 200)
    in_time = sum(seconds <= 2 for seconds in answered)
    p99 = answered[max(0, -(-len(answered) * 99 // 100) - 1)] if answered else float("inf")
    lives = {kind: [life for life, _, _ in closed] for kind, closed in siege.lifetimes.items()}
    print(
        f"\nsiege {SIEGE_SECONDS:g} s: good requests {len(outcomes)}, 200 within 2 s {in_time} "
        f"({in_time / max(1, len(outcomes)):.1%}), p50 {answered[len(answered) // 2] if answered else None:.3f} s, "
        f"p99 {p99:.3f} s; closed connections by kind (count, longest s): "
        + ", ".join(f"{kind} {len(v)} {max(v):.1f}" for kind, v in sorted(lives.items()))
        + f"; still open at the end {len(still_open)} (oldest {max(still_open, default=0):.1f} s); "
        f"Ctrl-C then: exit {code} after {stopped_in:.1f} s; "
        f"RSS {start_rss:.0f} -> peak {max(peak_rss):.0f} MiB; connections_closed {metrics['connections_closed']}"
    )
    assert code == 0 and stopped_in < STOP_SECONDS
    assert len(outcomes) >= SIEGE_SECONDS * 0.5
    assert in_time >= 0.95 * len(outcomes), outcomes
    # Every hostile connection is closed within its bound: a head (or an idle connection) within the head
    # timeout, a body at the latest when its schedule falls behind (5 s + bytes sent / 1 KiB/s), never past 30 s.
    for life, _, sent in siege.lifetimes.get("body", []):
        assert life <= min(READ_TIMEOUT, GRACE + sent / MIN_RATE) + SLACK_S
    for kind in ("head", "idle"):
        assert max(lives[kind]) <= HEAD_TIMEOUT + SLACK_S
    assert max(still_open, default=0) <= HEAD_TIMEOUT + SLACK_S
    assert (
        sum(answered_408 for _, answered_408, _ in siege.lifetimes["body"]) > 0
    )  # told why, when not evicted
    # The documented bound for these settings (SERVING.md): bodies 8 x 16 MiB, 1e6 8-bit pixels x 17 bytes, 1,024
    # connections x 80 KiB.
    assert max(peak_rss) - start_rss <= 128 + 17 + 80


def big_png(shade: int) -> bytes:
    """A legal 9000 x 9000 RGB PNG (81 Mpixel, under the 89.5 Mpixel limit) of a few hundred KB."""
    row = b"\x00" + bytes([shade, 255 - shade, shade // 2]) * 9000
    return png(9000, 9000, row * 9000)


def test_24_large_pngs_from_8_clients_keep_to_the_pixels_in_flight_bound(weights_dir: Path) -> None:
    image = big_png(40)
    with serve_process(str(weights_dir), "--precision", "fp32", "--pixel-wait", "2") as server:
        pid = server.process.pid
        start_rss = status_kib(pid, "VmRSS") / 1024
        statuses: list[int] = []

        def client() -> None:
            for _ in range(3):
                response = requests.post(
                    f"{server.url}/predict",
                    data=image,
                    headers={"Content-Type": "image/png"},
                    timeout=120,
                )
                statuses.append(response.status_code)

        clients = [threading.Thread(target=client) for _ in range(8)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(300)
        peak = status_kib(pid, "VmHWM") / 1024
        after = status_kib(pid, "VmRSS") / 1024
    print(
        f"\n24 PNGs of 9000x9000 from 8 clients: statuses {sorted(statuses)}; RSS {start_rss:.0f} -> peak "
        f"{peak:.0f} MiB (growth {peak - start_rss:.0f}), {after:.0f} MiB after"
    )
    assert len(statuses) == 24 and set(statuses) <= {200, 503} and 200 in statuses
    # SERVING.md: one 89.5 Mpixel 8-bit image in flight at 17 bytes a pixel (1,451 MiB) + bodies + connections
    assert peak - start_rss <= 1451 + 128 + 80

"""Every phase of a connection before the app sees a request, bounded: the request head, the idle time between
requests, the count of open connections in all and per client address.

uvicorn 0.54 (its h11 protocol) bounds the idle time after an answer (`timeout_keep_alive`) and the size of a request
head (h11's 16 KiB), but nothing else: a connection that never finishes its head is held for ever (the keep-alive
timer is cancelled by its first byte and not armed at all on a new connection), and `limit_concurrency` counts open
connections only to answer *requests* 503, so 1,000 idle connections turn every good request into a 503. This
subclass of uvicorn's `H11Protocol` adds what is missing, in the protocol, where no ASGI middleware can reach:

- a request head must be complete within `head_timeout_s` of the connection's opening or of its first byte after
  an answer; past it the connection is answered 408 (when some of a head arrived) or dropped (when none did);
- at most `max_connections` open connections, and `max_per_client` from one client address; a connection past
  either count takes the place of the oldest one that is waiting for a request head (idle or slow), which is
  dropped, so an idle crowd cannot lock good clients out; when every connection is busy with a request the new one
  is dropped;
- a connection whose answer went out while its request body was still unread is closed (its client would
  otherwise keep it by trickling the rest of the body).

The body's own deadline and minimum rate are checked where the app reads it (vitkit.service.limits).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_BYTES = 16 * 1024  # h11's largest request head (its default): a larger one is answered 400


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds on connections (the `vitkit serve` flags of the same names)."""

    head_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    max_connections: int = 1024
    max_per_client: int = 64

    def __post_init__(self) -> None:
        if self.head_timeout_s <= 0 or self.keep_alive_s <= 0:
            raise ValueError("head_timeout_s and keep_alive_s must be > 0")
        if not 1 <= self.max_per_client <= self.max_connections:
            raise ValueError(
                f"max_per_client must be between 1 and max_connections ({self.max_connections}), "
                f"got {self.max_per_client}"
            )


def timed_out_answer(seconds: float) -> bytes:
    """A whole 408 response written before h11 has a request to answer (h11 refuses to send one then)."""
    body = json.dumps({"error": f"the request head did not arrive within {seconds:g} s"}).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class ConnectionTable:
    """The open connections, oldest first, in all and by client address; counts why connections were closed."""

    def __init__(self, limits: ConnectionLimits, count: Callable[[str], None]) -> None:
        self.limits = limits
        self.count = count  # an event name -> Metrics.connection
        self.open: dict[BoundedH11Protocol, None] = {}  # insertion order: oldest first
        self.by_client: dict[str, dict[BoundedH11Protocol, None]] = {}

    def admit(self, connection: BoundedH11Protocol) -> bool:
        """Register `connection`, making room by dropping the oldest connection that waits for a request head;
        False (the caller drops it) when the counts are full of connections busy with requests."""
        same_client = self.by_client.setdefault(connection.client_host, {})
        if len(same_client) >= self.limits.max_per_client and not self.evict_oldest_waiting(same_client):
            self.count("refused_client_full")
            return False
        if len(self.open) >= self.limits.max_connections and not self.evict_oldest_waiting(self.open):
            self.count("refused_server_full")
            return False
        self.open[connection] = None
        same_client[connection] = None
        return True

    def evict_oldest_waiting(self, connections: dict[BoundedH11Protocol, None]) -> bool:
        for connection in connections:
            if connection.waiting_for_head():
                self.count("evicted")
                connection.drop()
                return True
        return False

    def remove(self, connection: BoundedH11Protocol) -> None:
        self.open.pop(connection, None)
        same_client = self.by_client.get(connection.client_host)
        if same_client is not None:
            same_client.pop(connection, None)
            if not same_client:
                del self.by_client[connection.client_host]


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a request-head deadline and connection counts (module docstring)."""

    table: ClassVar[ConnectionTable]  # set by bounded_protocol(), one per server

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client_host = "?"
        self.head_bytes = 0  # bytes of the request head received so far
        self.head_timer: asyncio.TimerHandle | None = None
        self.registered = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client_host = self.client[0] if self.client else "?"
        if not self.table.admit(self):
            transport.abort()
            return
        self.registered = True
        self.arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_head_timer()
        if self.registered:
            self.table.remove(self)
            self.registered = False
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            if self.head_timer is None:  # the first byte after an answer: the next head's deadline starts
                self.arm_head_timer()
            self.head_bytes += len(data)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete (or the connection failed)
            self.cancel_head_timer()
            self.head_bytes = 0

    def on_response_complete(self) -> None:
        if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
            self.count_and_close("closed_body_unread")  # the answer went out before the body was read
            return
        super().on_response_complete()

    def waiting_for_head(self) -> bool:
        """Idle or receiving a request head: nothing of the app runs for it, so it can be dropped."""
        return (self.cycle is None or self.cycle.response_complete) and self.conn.their_state in (
            h11.IDLE,
            h11.DONE,
        )

    def drop(self) -> None:
        """Close at once and leave the counts now (connection_lost comes a turn of the loop later)."""
        self.cancel_head_timer()
        if self.registered:
            self.table.remove(self)
            self.registered = False
        self.transport.abort()

    def arm_head_timer(self) -> None:
        self.cancel_head_timer()
        self.head_timer = self.loop.call_later(self.table.limits.head_timeout_s, self.head_timed_out)

    def cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.head_bytes:
            self.transport.write(timed_out_answer(self.table.limits.head_timeout_s))
            self.count_and_close("head_timeout_408")
        else:
            self.count_and_close("idle_timeout")

    def count_and_close(self, event: str) -> None:
        self.table.count(event)
        self.cancel_head_timer()
        self.transport.close()


def bounded_protocol(limits: ConnectionLimits, count: Callable[[str], None]) -> type[BoundedH11Protocol]:
    """A protocol class for one uvicorn server: its connections share one table."""
    return type("ServedH11Protocol", (BoundedH11Protocol,), {"table": ConnectionTable(limits, count)})

"""Request bodies kept within bounds before any handler sees them: a size limit, a deadline with a minimum rate,
and a budget for the body bytes held at once.

A pure ASGI middleware, so it holds for the raw body and for multipart forms alike (Starlette's form parser reads
through the same `receive`). A declared Content-Length above the limit is answered 413 before a byte of the body
is read; a chunked body is counted as it arrives and cut at the limit. The body keeps to a schedule counted from
the end of the request head, not from each read: `t` seconds in, it must have sent
`min_rate * (t - grace_s)` bytes, and all of it within `timeout_s`, else 408 and the connection is closed; a
client trickling a byte now and then is cut `grace_s` (5 s) after its head, however it spaces its bytes. The bytes of the bodies held at once (arriving, decoded or waiting) are at most `budget_bytes`; a body that
would pass it is answered 503. A client that goes away before its body is complete ends its request as 499 in the
metrics with one log line, not a 500 and a traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]
GONE = 499  # nginx's "client closed request": counted, never sent


class RequestRefused(Exception):
    """A request answered with `status` and a one-line `reason` (the JSON body {"error": reason})."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ClientGone(RequestRefused):
    """The client closed its connection before its body was complete: there is nobody to answer."""

    def __init__(self, received: int, declared: bytes | None) -> None:
        expected = f" of {int(declared):,}" if declared is not None and declared.isdigit() else ""
        super().__init__(GONE, f"the client went away after {received:,}{expected} body bytes")


def too_large(limit: int, size: int | None = None) -> RequestRefused:
    got = f"{size:,} bytes" if size is not None else "more"
    return RequestRefused(413, f"request body of {got} is above the limit of {limit:,} bytes")


@dataclass(frozen=True)
class BodyBounds:
    """What a request body may take: bytes, time, rate, and the bytes of all bodies held at once."""

    max_bytes: int
    timeout_s: float
    min_rate: float  # bytes per second, after grace_s
    budget_bytes: int
    grace_s: float = 5.0


def too_slow(bounds: BodyBounds, received: int, elapsed: float) -> RequestRefused:
    return RequestRefused(
        408,
        f"the request body arrived too slowly: {received:,} bytes in {elapsed:.1f} s (expected all of it within "
        f"{bounds.timeout_s:g} s, and {bounds.min_rate / 1024:g} KiB/s or more after the first "
        f"{bounds.grace_s:g} s)",
    )


class BodyLimits:
    def __init__(self, app: ASGIApp, bounds: BodyBounds) -> None:
        self.app = app
        self.bounds = bounds
        self.held = 0  # body bytes of the requests in progress; touched on the event loop only

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bounds = self.bounds
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > bounds.max_bytes:
            await refuse(send, too_large(bounds.max_bytes, int(declared)))
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        received = 0
        body_done = False

        async def bounded() -> Message:
            nonlocal received, body_done
            if body_done:  # after the body: waiting for a disconnect, no deadline
                return await receive()
            due = start + min(bounds.timeout_s, bounds.grace_s + received / bounds.min_rate)
            try:
                message = await asyncio.wait_for(receive(), max(0.0, due - loop.time()))
            except TimeoutError:
                raise too_slow(bounds, received, loop.time() - start) from None
            if message["type"] == "http.disconnect":
                raise ClientGone(received, declared)
            size = len(message.get("body", b""))
            if received + size > bounds.max_bytes:
                raise too_large(bounds.max_bytes)
            if self.held + size > bounds.budget_bytes:
                raise RequestRefused(
                    503,
                    f"busy: {self.held / 2**20:.0f} MiB of request bodies held "
                    f"(limit {bounds.budget_bytes / 2**20:.0f} MiB); retry later",
                )
            received += size
            self.held += size
            body_done = not message.get("more_body", False)
            return message

        try:
            await self.app(scope, bounded, send)
        finally:
            self.held -= received


async def refuse(send: Callable[[Message], Awaitable[None]], refused: RequestRefused) -> None:
    """Answer without the app: the status and {"error": reason}, and close the connection (the body is unread)."""
    body = json.dumps({"error": refused.reason}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""Request bodies kept within bounds before any handler sees them: a size limit and a read deadline.

A pure ASGI middleware, so it holds for the raw body and for multipart forms alike (Starlette's form parser reads
through the same `receive`). A declared Content-Length above the limit is answered 413 before a byte of the body
is read; a chunked body is counted as it arrives and cut at the limit. A client that sends its body slower than
`read_timeout_s` allows (a stalled or trickling upload) gets 408 and its connection back, so it cannot hold one
of the service's admission slots for long.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]


class RequestRefused(Exception):
    """A request answered with `status` and a one-line `reason` (the JSON body {"error": reason})."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def too_large(limit: int, size: int | None = None) -> RequestRefused:
    got = f"{size:,} bytes" if size is not None else "more"
    return RequestRefused(413, f"request body of {got} is above the limit of {limit:,} bytes")


class BodyLimits:
    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await refuse(send, too_large(self.max_bytes, int(declared)))
            return
        received = 0
        body_done = False

        async def bounded() -> Message:
            nonlocal received, body_done
            if body_done:  # after the body: waiting for a disconnect, no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.read_timeout_s)
            except TimeoutError:
                raise RequestRefused(
                    408, f"the request body did not arrive within {self.read_timeout_s:g} s"
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large(self.max_bytes)
                body_done = not message.get("more_body", False)
            return message

        await self.app(scope, bounded, send)


async def refuse(send: Callable[[Message], Awaitable[None]], refused: RequestRefused) -> None:
    """Answer without the app: the status and {"error": reason}, and close the connection (the body is unread)."""
    body = json.dumps({"error": refused.reason}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

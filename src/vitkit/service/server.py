"""The server around the app: uvicorn on a socket vitkit binds itself, so `--port 0` can report the port it got,
speaking HTTP/1.1 through vitkit.service.connections' bounded protocol.

uvicorn's graceful shutdown is the life cycle: on SIGTERM or SIGINT it closes the listening socket, closes idle
connections, lets every request in progress be answered (within `GRACE_SECONDS`), then ends the app's lifespan,
which stops the model thread once its queue is empty (within `MODEL_STOP_SECONDS`): the process ends within
`STOP_SECONDS` of the signal.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn

from vitkit.service.connections import HEAD_BYTES, ConnectionLimits, bounded_protocol
from vitkit.service.limits import ASGIApp

STOP_SECONDS = 10  # from SIGTERM or SIGINT to the end of `vitkit serve`, documented in SERVING.md
GRACE_SECONDS = 6  # requests in progress at the signal have this long to be answered
MODEL_STOP_SECONDS = (
    2  # then the model thread this long to finish its queue; the rest is the interpreter's exit
)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one); IPv6 for an address with a colon."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(error.errno, f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.set_inheritable(True)
    return sock


def address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def server(
    app: ASGIApp, limits: ConnectionLimits, count: Callable[[str], None], access_log: bool = False
) -> uvicorn.Server:
    """A uvicorn server for `app` whose connections keep `limits`; `count` hears why connections were closed."""
    config = uvicorn.Config(
        app,
        http=bounded_protocol(limits, count),
        lifespan="on",
        access_log=access_log,
        log_level="info" if access_log else "warning",
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # uvicorn takes any number of seconds
        timeout_graceful_shutdown=GRACE_SECONDS,
        h11_max_incomplete_event_size=HEAD_BYTES,
    )
    return uvicorn.Server(config)

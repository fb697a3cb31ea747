"""The server around the app: uvicorn on a socket vitkit binds itself, so `--port 0` can report the port it got.

uvicorn's graceful shutdown is the life cycle: on SIGTERM or SIGINT it closes the listening socket, closes idle
connections, lets every request in progress be answered (within `GRACE_SECONDS`), then ends the app's lifespan,
which stops the model thread once its queue is empty.
"""

from __future__ import annotations

import socket

import uvicorn

from vitkit.service.limits import ASGIApp

GRACE_SECONDS = (
    8  # requests in progress at SIGTERM have this long to be answered: the process ends within 10 s
)
KEEP_ALIVE_SECONDS = 5


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


def server(app: ASGIApp, max_connections: int, access_log: bool = False) -> uvicorn.Server:
    """A uvicorn server for `app`; past `max_connections` open connections and requests it answers 503."""
    config = uvicorn.Config(
        app,
        lifespan="on",
        access_log=access_log,
        log_level="info" if access_log else "warning",
        limit_concurrency=max_connections,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=GRACE_SECONDS,
    )
    return uvicorn.Server(config)

"""`vitkit serve WEIGHTS`: the model behind an HTTP API with dynamic batching, and a page to try it in a browser.

SIGTERM or Ctrl-C, once it listens, is its normal stop: no new connection is accepted, every request in progress
is answered, then the process exits 0 within 10 s (vitkit.service.server). Before it listens (loading the model)
the signal interrupts it as any command: exit 130.
"""

from __future__ import annotations

import argparse
import logging
import resource
import signal
import sys

from vitkit.service import ServiceOptions, asgi_app, load_served_model
from vitkit.service.connections import ConnectionLimits
from vitkit.service.server import address, bind, server

MIB = 2**20
KIB = 2**10
SPARE_FILES = 128  # file descriptors besides the connections: the model, libraries, logs


def raise_file_limit(connections: int) -> None:
    """Lift the soft limit on open files to what `connections` need, as far as the hard limit allows."""
    needed = connections + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise ValueError(
                f"--max-connections {connections} needs {needed} open files, above this process's hard limit of "
                f"{hard} (ulimit -Hn); lower --max-connections or raise the limit"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def run(args: argparse.Namespace) -> int:
    options = ServiceOptions(
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_upload_bytes=int(args.max_upload_mb * MIB),
        max_pixels=args.max_pixels,
        max_pixels_in_flight=args.max_pixels_in_flight,
        decode_threads=args.decode_threads,
        pixel_wait_s=args.pixel_wait,
        read_timeout_s=args.read_timeout,
        min_body_rate=args.min_body_rate * KIB,
        top=args.top,
        connections=ConnectionLimits(
            head_timeout_s=args.header_timeout,
            keep_alive_s=args.keep_alive,
            max_connections=args.max_connections,
            max_per_client=args.max_connections_per_client,
        ),
    )
    raise_file_limit(args.max_connections)
    logger = logging.getLogger("vitkit.serve")  # the model thread's lines: ready, or why it failed
    if not logger.handlers:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(logging.Formatter("vitkit serve: %(message)s"))
        logger.addHandler(stream)
        logger.setLevel(logging.INFO)
    model = load_served_model(args.weights, format=args.format, device=args.device, precision=args.precision)
    app, service = asgi_app(model, options)
    sock = bind(args.host, args.port)
    batching = (
        f"batches of up to {args.max_batch}, {args.max_wait_ms:g} ms wait"
        if args.max_batch > 1
        else "batching off"
    )
    print(
        f"vitkit serve: {model.name} ({model.architecture}, {model.runtime}, {model.version}) on {address(sock)} "
        f"- {batching}; the page at /, the API at /predict",
        file=sys.stderr,
        flush=True,
    )
    stopped: list[str] = []
    # uvicorn raises the signal again once it has shut down; recorded here, it ends the command with exit code 0
    previous = {
        s: signal.signal(s, lambda number, frame: stopped.append(signal.Signals(number).name))
        for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        server(app, options.connections, service.metrics.connection, args.access_log).run(sockets=[sock])
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if service.batcher.failure is not None:
        raise RuntimeError(f"the model thread failed: {service.batcher.failure}")
    snapshot = service.metrics.snapshot(service.batcher.queued)
    answered = sum(sum(by_status.values()) for by_status in snapshot["requests"].values())
    why = f"stopped by {stopped[0]}" if stopped else "stopped"
    print(
        f"vitkit serve: {why}; {answered} requests answered, {snapshot['images_predicted']} images",
        file=sys.stderr,
    )
    return 0

"""`vitkit serve WEIGHTS`: the model behind an HTTP API with dynamic batching, and a page to try it in a browser.

SIGTERM or Ctrl-C stop it cleanly: no new connection is accepted, every request in progress is answered, then
the process exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_max_pixels_argument, add_precision_argument
from vitkit.service import ServiceOptions, asgi_app, load_served_model
from vitkit.service.server import address, bind, server

HELP = "serve a model over HTTP: /predict (JSON), dynamic batching, /health, /ready, /metrics, a page at /"
MIB = 2**20


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


# the service's numeric settings: flag, type, default, what it bounds
NUMBERS = [
    ("--max-batch", positive_int, 16, "images per forward pass at most; 1 turns batching off"),
    (
        "--max-wait-ms",
        non_negative_float,
        10.0,
        "milliseconds the model waits for more images after a batch's first",
    ),
    (
        "--max-queue",
        positive_int,
        64,
        "images in progress at most (read, decoded or queued); more are answered 503",
    ),
    ("--max-upload-mb", positive_float, 16.0, "largest request body in MiB; larger ones are answered 413"),
    ("--read-timeout", positive_float, 30.0, "seconds a client has to send its body; then 408"),
    ("--decode-threads", positive_int, 2, "threads decoding uploads, beside the model's thread"),
    ("--max-connections", positive_int, 256, "open connections and requests at most; more are answered 503"),
    ("--top", positive_int, 5, "classes per answer unless ?top=K asks"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "weights",
        metavar="WEIGHTS",
        help="a run, a save_pretrained directory, a named checkpoint, a weights file, or an exported .onnx / .pt2",
    )
    parser.add_argument(
        "--format", choices=("npz", "vitkit", "timm", "hf"), help="weights format if not evident"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda:1', ...")
    add_precision_argument(parser)
    for flag, kind, default, text in NUMBERS:
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default {default:g})")
    add_max_pixels_argument(parser)
    parser.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")


def run(args: argparse.Namespace) -> int:
    options = ServiceOptions(
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_upload_bytes=int(args.max_upload_mb * MIB),
        max_pixels=args.max_pixels,
        decode_threads=args.decode_threads,
        read_timeout_s=args.read_timeout,
        top=args.top,
    )
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
        server(app, args.max_connections, args.access_log).run(sockets=[sock])
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

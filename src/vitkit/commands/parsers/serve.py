"""The options of `vitkit serve`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.serve only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_max_pixels_argument, add_precision_argument

HELP = "serve a model over HTTP: /predict (JSON), dynamic batching, /health, /ready, /metrics, a page at /"


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
    (
        "--header-timeout",
        positive_float,
        10.0,
        "seconds a connection has to send a whole request head; then 408",
    ),
    ("--keep-alive", positive_float, 5.0, "seconds an idle connection is kept open between requests"),
    ("--read-timeout", positive_float, 30.0, "seconds a client has to send its whole body; then 408"),
    ("--min-body-rate", positive_float, 1.0, "KiB/s a body must average after its first 5 s; slower is 408"),
    (
        "--pixel-wait",
        positive_float,
        10.0,
        "seconds an image waits for room among the pixels in flight; then 503",
    ),
    ("--decode-threads", positive_int, 2, "threads decoding uploads, beside the model's thread"),
    (
        "--max-connections",
        positive_int,
        1024,
        "open connections at most; a new one replaces the oldest idle one, or is closed",
    ),
    ("--max-connections-per-client", positive_int, 64, "open connections from one client address at most"),
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
    parser.add_argument(
        "--max-pixels-in-flight",
        type=positive_int,
        help="decoded pixels admitted at once, 17 bytes of memory each at most (27 for 16-bit grey); more wait, "
        "then 503 (default: the pixel limit, one largest image at a time)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")

"""The options of `vitkit weights`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.weights only to run it)."""

from __future__ import annotations

import argparse

HELP = "published ViT checkpoints by name: list them, download one into the cache (or a URL), print its path"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the names, what each holds, and which are cached")
    listing.add_argument("pattern", nargs="?", default="*", help="glob on the names, e.g. '*B/16*'")
    get = actions.add_parser("get", help="download into the cache (verified, resumable) and print the path")
    get.add_argument("names", nargs="+", metavar="NAME", help="checkpoint names, http(s) URLs or hf-hub:<id>")
    get.add_argument("--quiet", action="store_true", help="no progress bar")
    path = actions.add_parser("path", help="print where a name or URL is cached (whether or not it is yet)")
    path.add_argument("names", nargs="+", metavar="NAME", help="checkpoint names or http(s) URLs")

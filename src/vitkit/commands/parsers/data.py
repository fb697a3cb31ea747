"""The options of `vitkit data`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.data only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands._arguments import literal

HELP = "image collections: pack one as WebDataset shards or a Hugging Face dataset; describe and check one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    packer = sub.add_parser(
        "pack", help="write SRC's train and test splits as shards (wds) or a datasets dir (hf)"
    )
    packer.add_argument("src", help="data source: dataset name, folder:PATH (or PATH), hf:PATH, wds:DIR")
    packer.add_argument("--out", required=True, help="new or empty directory (or bucket URL, wds) to write")
    packer.add_argument(
        "--format",
        choices=literal("vitkit.data.pack", "FORMATS"),
        default="wds",
        help="wds: tar shards (default); hf: datasets",
    )
    packer.add_argument("--shard-images", type=int, default=1000, help="images per shard (wds; default 1000)")
    packer.add_argument("--seed", type=int, default=0, help="key of the shuffled order shards are written in")
    packer.add_argument(
        "--keep-order",
        action="store_true",
        help="write shards in the source's order (a stream reads shards front to back, so class-sorted "
        "shards give batches of one class)",
    )
    packer.add_argument("--data-dir", help="where a named dataset lives")
    info = sub.add_parser(
        "info", help="images, classes, sizes and reader of SRC; --check decodes every image"
    )
    info.add_argument("src", help="data source: dataset name, folder:PATH (or PATH), hf:PATH, wds:DIR")
    info.add_argument("--check", action="store_true", help="decode every image and list the unreadable ones")
    info.add_argument("--data-dir", help="where a named dataset lives")

"""`vitkit data pack SRC --out DIR` and `vitkit data info SRC`: repack an image collection, describe and check one."""

from __future__ import annotations

import argparse
import time

from vitkit.data import open_source
from vitkit.data.pack import FORMATS, pack, summarise

HELP = "image collections: pack one as WebDataset shards or a Hugging Face dataset; describe and check one"
SPLITS = ("train", "test")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    packer = sub.add_parser(
        "pack", help="write SRC's train and test splits as shards (wds) or a datasets dir (hf)"
    )
    packer.add_argument("src", help="data source: dataset name, folder:PATH (or PATH), hf:PATH, wds:DIR")
    packer.add_argument("--out", required=True, help="new or empty directory (or bucket URL, wds) to write")
    packer.add_argument(
        "--format", choices=FORMATS, default="wds", help="wds: tar shards (default); hf: datasets"
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


def run(args: argparse.Namespace) -> int:
    sources = {split: open_source(args.src, split, args.data_dir) for split in SPLITS}
    if args.action == "pack":
        start = time.perf_counter()
        seed = None if args.keep_order else args.seed
        for packed in pack(sources, args.out, args.format, args.shard_images, seed):
            size = packed.bytes / 2**20
            print(f"{packed.split}: {packed.images} images in {len(packed.files)} file(s), {size:.1f} MiB")
        prefix = "wds" if args.format == "wds" else "hf"
        print(
            f"wrote {args.out} in {time.perf_counter() - start:.1f} s; train on it with data.source={prefix}:{args.out}"
        )
        return 0
    unreadable = 0
    for split, source in sources.items():
        summary = summarise(source, split, args.check)
        print(f"{split}: {summary.description}")
        print(f"  reader: {summary.reader}")
        print(f"  images: {summary.images}, classes: {len(summary.per_class)}")
        counts = sorted(summary.per_class.values())
        empty = [name for name, n in summary.per_class.items() if n == 0]
        print(
            f"  images per class: min {counts[0]}, max {counts[-1]}"
            + (f"; empty: {', '.join(empty)}" if empty else "")
        )
        common = ", ".join(f"{w}x{h} ({n})" for (w, h), n in summary.sizes.most_common(5))
        measured = (
            "all" if args.check or summary.measured == summary.images else f"{summary.measured} sampled"
        )
        print(f"  sizes ({measured}): {common or 'none readable'}; {len(summary.sizes)} distinct")
        if args.check or summary.unreadable:
            print(f"  unreadable: {len(summary.unreadable)}")
            for line in summary.unreadable:
                print(f"    {line}")
        unreadable += len(summary.unreadable)
    return 1 if unreadable and args.check else 0

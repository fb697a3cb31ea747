"""`vitkit data pack SRC --out DIR` and `vitkit data info SRC`: repack an image collection, describe and check one."""

from __future__ import annotations

import argparse
import time

from vitkit.data import open_source
from vitkit.data.pack import pack, summarise

SPLITS = ("train", "test")


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

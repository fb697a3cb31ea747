"""`vitkit weights list|get|path`: the published checkpoints by name, fetched into the cache (docs/WEIGHTS.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vitkit.weights.cached_files import cache_path, without_credentials
from vitkit.weights.download import fetch
from vitkit.weights.hub import (
    BASE_URL_ENV,
    HF_HUB_PREFIX,
    Pretrained,
    base_url,
    find,
    hub_cached,
    hub_files,
    is_url,
    list_pretrained,
)
from vitkit.weights.load import fetch_named


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return list_names(args.pattern)
    for name in args.names:
        print(fetch_one(name, not args.quiet) if args.action == "get" else where(name))
    return 0


def list_names(pattern: str) -> int:
    entries = list_pretrained(pattern)
    if not entries:
        raise ValueError(f"no checkpoint name matches {pattern!r} (vitkit weights list shows them all)")
    width = max(len(e.name) for e in entries)
    models = max(len(e.model) for e in entries)
    print(f"{'name':<{width}}  {'model':<{models}}  {'pre-training':<12}  {'fine-tuning':<11}  {'px':>3}  "
          f"{'classes':>7}  {'licence':<10}  {'source':<11}  cached")  # fmt: skip
    for e in entries:
        cached = "yes" if cached_file(e) is not None else ""
        source = e.source if e.hub_id else "vit_models"
        print(f"{e.name:<{width}}  {e.model:<{models}}  {e.pretraining:<12}  {e.fine_tuning or '-':<11}  "
              f"{e.img_size:>3}  {e.num_classes:>7}  {e.licence:<10}  {source:<11}  {cached}")  # fmt: skip
    print(f"vit_models: files from {without_credentials(base_url())} (${BASE_URL_ENV} names a mirror); "
          "hf-hub: through huggingface_hub's cache", file=sys.stderr)  # fmt: skip
    return 0


def cached_file(entry: Pretrained) -> Path | None:
    """Where a checkpoint's weights are cached, None when they are not."""
    if entry.hub_id:
        return hub_cached(entry)
    return entry.cache_path if entry.cache_path.is_file() else None


def fetch_one(name: str, progress: bool) -> str:
    entry = find(name)
    if entry is not None:
        return str(fetch_named(entry, progress))
    if is_url(name):
        return str(fetch(name, progress=progress))
    if name.startswith(HF_HUB_PREFIX):
        return str(hub_files(name)[0])
    raise ValueError(
        f"{name}: not a checkpoint name (vitkit weights list), an http(s) URL or {HF_HUB_PREFIX}<id>"
    )


def where(name: str) -> str:
    entry = find(name)
    if entry is not None and entry.hub_id:
        cached = hub_cached(entry)
        if cached is None:
            raise ValueError(f"{name}: not in the Hugging Face cache yet (vitkit weights get {entry.name})")
        return str(cached)
    if entry is not None:
        return str(entry.cache_path)
    if is_url(name):
        return str(cache_path(name))
    raise ValueError(f"{name}: not a checkpoint name (vitkit weights list) or an http(s) URL")

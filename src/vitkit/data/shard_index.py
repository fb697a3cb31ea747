"""Which tar shards make up each split of a `wds:` source, how many samples each holds, and the classes.

Three layouts are read:

* vitkit's own (`vitkit data pack`): DIR/dataset.json lists the classes and, per split, its shards and their counts;
* shards as the `webdataset` library's ShardWriter and timm's users write them, with no index: a directory per
  split (ROOT/train/*.tar, ROOT/val/*.tar, or test/ or validation/), or the split's name in the file names
  (ROOT/train-0000.tar, ROOT/imagenet-val-0001.tar);
* a brace or glob pattern (`shards/train-{0000..0099}.tar`, `shards/train-*.tar`) for the training split, whose
  evaluation split is the same pattern with `train` replaced by test, validation or val, where that names files;
  `{split}` in a pattern (`shards/{split}-{0000..0099}.tar`) stands for the split's name.

Without an index, one pass over the shards (tar headers and the small `.cls` members only) counts each shard's
samples (member names sharing a key up to the first dot) and finds the labels; the classes are 0..max label,
named by their index. The result is kept in the cache directory, keyed by the shards' paths, sizes and
modification times (a remote shard's: its URL, size and ETag), so the pass is made once per machine until a shard
changes, and DataLoader workers are handed the index rather than making it again.

A location may be a URL (s3://, gs://, https://, ...: vitkit.data.remote) in each of these layouts; a directory per
split needs a store that lists directories (object stores do, plain HTTP servers do not: give dataset.json or a
brace pattern there).
"""

from __future__ import annotations

import glob
import json
import os
import re
import tarfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitkit.cache import read_record, record_path, write_record

from .lazy import TEST_SPLITS
from .remote import RemoteShard, existing, fetch, is_url, join, read_bytes, tars_in

INFO_NAME = "dataset.json"
LABEL_EXTENSION = "cls"
SPLITS = ("train", *TEST_SPLITS)
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_CHOICE = re.compile(r"\{([^{}]*,[^{}]*)\}")
_MAX_LABEL_BYTES = 64  # a .cls member is a decimal class index

ShardFile = Path | RemoteShard  # a local shard, or one at a URL with the size and ETag it was indexed at


@dataclass(frozen=True)
class ShardIndex:
    """The shards of one split, in order, with the samples each holds; the classes shared by every split."""

    paths: list[ShardFile]
    counts: list[int]
    classes: list[str]
    split: str
    location: str  # what the shards were found as, for messages


def find_shards(location: str | os.PathLike, split: str) -> ShardIndex:
    """The shards of `split` ('train', or an evaluation split: test, validation or val, whichever exists)."""
    text = os.fspath(location)
    remote = is_url(text)
    if not remote:
        text = os.path.expanduser(text)
    pattern = glob.has_magic(text) or "{" in text
    if pattern:
        info = None
    else:
        info = read_bytes(join(text, INFO_NAME)) if remote else _local_bytes(Path(text) / INFO_NAME)
    if info is not None:
        return packed_index(text, info, split)
    if not remote and not pattern and not os.path.exists(text):
        raise FileNotFoundError(f"{text}: no such directory")
    splits = split_files(text)
    if not splits:
        raise FileNotFoundError(
            f"{text}: no WebDataset shards: expected {INFO_NAME} (vitkit data pack), a directory per split "
            f"(train/*.tar, val/*.tar), split names in the file names (train-0000.tar) or a brace pattern "
            f"(train-{{0000..0099}}.tar)"
        )
    name = pick_split(split, splits, text)
    counts, classes = scanned(splits, text)
    return ShardIndex(splits[name], counts[name], classes, name, text)


def pick_split(split: str, available: Collection[str], where: str) -> str:
    """The split asked for: 'train' itself, or the first evaluation split (test, validation, val) present."""
    wanted = (split,) if split == "train" else (split, *TEST_SPLITS)
    name = next((s for s in wanted if s in available), None)
    if name is None:
        raise FileNotFoundError(f"{where}: no {split} split (found {', '.join(available) or 'none'})")
    return name


def _local_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def packed_index(directory: str, info: bytes, split: str) -> ShardIndex:
    """vitkit's layout: dataset.json (`info`) names the classes and each split's shards with their sample counts."""
    info_path = join(directory, INFO_NAME)
    classes, splits = read_index(info, info_path)
    name = pick_split(split, splits, info_path)
    shards = splits[name]["shards"]
    wanted = [join(directory, shard["name"]) for shard in shards]
    counts = [shard["images"] for shard in shards]
    paths: list[ShardFile]
    if is_url(directory):
        shards, missing = existing(wanted)
        paths = list(shards)
    else:
        missing = [p for p in wanted if not Path(p).is_file()]
        paths = [Path(p) for p in wanted]
    if missing:
        raise FileNotFoundError(f"{missing[0]}: missing shard ({len(missing)} of {len(wanted)} missing)")
    return ShardIndex(paths, counts, classes, name, f"{directory}/{name}-*.tar")


def read_index(data: bytes, info_path: str) -> tuple[list[str], dict[str, Any]]:
    """(classes, splits) of a dataset.json's bytes, every field checked: a missing or mistyped one is a one-line
    error naming it, before anything is read or written."""
    where = f"{info_path}: not a vitkit shard index"
    try:
        info = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{where} (not JSON: {err})") from None
    shape = '{"classes": ["a", ...], "splits": {"train": {"shards": [{"name": "train-000000.tar", "images": N}]}}}'
    if not isinstance(info, dict):
        raise ValueError(f"{where}: expected an object {shape}")
    classes, splits = info.get("classes"), info.get("splits")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) and c for c in classes):
        raise ValueError(f"{where}: 'classes' must be a non-empty list of class names, got {classes!r:.80}")
    if len(set(classes)) < len(classes):
        raise ValueError(f"{where}: 'classes' names a class twice")
    if not isinstance(splits, dict) or not splits:
        raise ValueError(
            f"{where}: 'splits' must be an object of splits, got {splits!r:.80} (expected {shape})"
        )
    for split, entry in splits.items():
        shards = entry.get("shards") if isinstance(entry, dict) else None
        if not isinstance(shards, list) or not shards:
            raise ValueError(f"{where}: 'splits.{split}.shards' must be a non-empty list, got {shards!r:.80}")
        for i, shard in enumerate(shards):
            name = shard.get("name") if isinstance(shard, dict) else None
            images = shard.get("images") if isinstance(shard, dict) else None
            if not isinstance(name, str) or not name or os.path.basename(name) != name:
                raise ValueError(
                    f"{where}: 'splits.{split}.shards[{i}].name' must be a file name, got {name!r:.80}"
                )
            if not isinstance(images, int) or isinstance(images, bool) or images < 0:
                raise ValueError(
                    f"{where}: 'splits.{split}.shards[{i}].images' must be a whole number >= 0, got {images!r:.80}"
                )
    return classes, splits


def split_files(location: str) -> dict[str, list[ShardFile]]:
    """Split name -> its shard files (sorted), for a directory or a pattern; splits without files left out."""
    found: dict[str, list[ShardFile]] = {}
    if _is_directory(location):
        in_root: list[ShardFile] | None = None
        for split in SPLITS:
            files = _tars_in(join(location, split))
            if not files:
                token = re.compile(rf"(^|[-_.]){split}([-_.]|$)")
                in_root = _tars_in(location) if in_root is None else in_root
                files = [p for p in in_root if token.search(p.stem)]
            if files:
                found[split] = files
        return found
    for split in SPLITS:
        if "{split}" in location:
            pattern = location.replace("{split}", split)
        elif split == "train":
            pattern = location
        elif "train" in location:
            pattern = location.replace("train", split)
        else:
            continue
        expansion = expand(pattern)
        # The names the user wrote for a split must all exist: the training split's, and with `{split}` those of
        # each evaluation split that has any (one that has none is absent). An evaluation pattern made by
        # replacing `train` takes what exists: an evaluation split has its own, usually smaller, shard count.
        spelled = split == "train" or ("{split}" in location and bool(expansion.files))
        if expansion.absent and spelled:
            raise FileNotFoundError(expansion.absent_message(pattern))
        if expansion.files:
            found[split] = expansion.files
    return found


def _is_directory(location: str) -> bool:
    if is_url(location):  # object stores have no directories to ask about, only names to list
        return not glob.has_magic(location) and "{" not in location
    return Path(location).is_dir()


def _tars_in(directory: str) -> list[ShardFile]:
    if is_url(directory):
        return list(tars_in(directory))
    return list(sorted(Path(directory).glob("*.tar")))


@dataclass(frozen=True)
class Expansion:
    """What a pattern names: the existing files, in order and without repeats; the names it spells that name no
    file and the wildcards that match none; how many names and wildcards it spells."""

    files: list[ShardFile]
    absent: list[str]
    spelled: int

    def absent_message(self, pattern: str) -> str:
        """One line naming the first absent name and how many of the pattern's are absent."""
        first = self.absent[0]
        what = "matches no file" if glob.has_magic(first) else "missing shard"
        if self.spelled == 1:
            return f"{first}: {what}"
        return (
            f"{first}: {what} ({len(self.absent)} of the {self.spelled} names {pattern} spells are missing)"
        )


def expand(pattern: str) -> Expansion:
    """The files a brace pattern ({0000..0099} ranges, zero-padded as written; {a,b} choices) with shell
    wildcards names, and the names it spells that name none."""
    names = [pattern]
    for regex, options in ((_RANGE, _range_options), (_CHOICE, lambda m: m.group(1).split(","))):
        expanded = []
        for name in names:
            expanded += _expand_all(name, regex, options)
        names = expanded
    if is_url(pattern):
        shards, absent = existing(names)
        return Expansion(list(shards), absent, len(names))
    files: dict[str, None] = {}
    absent = []
    for name in names:
        matches = sorted(glob.glob(name)) if glob.has_magic(name) else [name]
        matches = [match for match in matches if Path(match).is_file()]
        if not matches:
            absent.append(name)
        files.update(dict.fromkeys(matches))
    return Expansion([Path(f) for f in files], absent, len(names))


def _range_options(match: re.Match[str]) -> list[str]:
    first, last = match.group(1), match.group(2)
    width = len(first) if first.startswith("0") and len(first) > 1 else 0
    step = 1 if int(last) >= int(first) else -1
    return [str(i).zfill(width) for i in range(int(first), int(last) + step, step)]


def _expand_all(
    name: str, regex: re.Pattern[str], options: Callable[[re.Match[str]], list[str]]
) -> list[str]:
    match = regex.search(name)
    if match is None:
        return [name]
    head, tail = name[: match.start()], name[match.end() :]
    return [
        expanded
        for option in options(match)
        for expanded in _expand_all(head + option + tail, regex, options)
    ]


def scanned(splits: dict[str, list[ShardFile]], location: str) -> tuple[dict[str, list[int]], list[str]]:
    """Samples per shard of every split and the classes, from the cache or one pass over the shards."""
    key = [_identity(p) for files in splits.values() for p in files]
    record = record_path("shards", key)
    stored = read_record(record)
    if stored is not None and set(stored.get("counts", {})) == set(splits):
        return stored["counts"], stored["classes"]
    counts: dict[str, list[int]] = {}
    labels: set[int] = set()
    for split, files in splits.items():
        counts[split] = []
        for path in files:
            count, found = scan_shard(path)
            counts[split].append(count)
            labels |= found
    if not labels:
        raise ValueError(
            f"{location}: no .{LABEL_EXTENSION} labels in the shards (expected a class index per sample)"
        )
    classes = [str(i) for i in range(max(labels) + 1)]
    write_record(record, {"location": location, "counts": counts, "classes": classes})
    return counts, classes


def _identity(shard: ShardFile) -> list[str | int]:
    """What the cached count of a shard is kept under: it changes when the shard does."""
    if isinstance(shard, RemoteShard):
        return [shard.url, shard.size, shard.etag]
    stat = shard.stat()
    return [str(shard.resolve()), stat.st_size, stat.st_mtime_ns]


def scan_shard(path: ShardFile) -> tuple[int, set[int]]:
    """(samples, labels) of one shard: a sample is a run of file members sharing a key (up to the first dot)."""
    if isinstance(path, RemoteShard):
        with fetch(path) as file:
            return scan_tar(path, lambda: tarfile.open(fileobj=file, mode="r|*"))
    return scan_tar(path, lambda: tarfile.open(path, "r|*"))


def scan_tar(path: ShardFile, opened: Callable[[], tarfile.TarFile]) -> tuple[int, set[int]]:
    """scan_shard on the tar reader `opened` makes; an unreadable shard is a one-line ValueError naming `path`."""
    count, labels, current = 0, set(), None
    try:
        with opened() as tar:
            for member in tar:
                if not member.isfile():
                    continue
                stem, _, extension = os.path.basename(member.name).partition(".")
                sample = f"{os.path.dirname(member.name)}/{stem}"
                if sample != current:
                    count, current = count + 1, sample
                if extension == LABEL_EXTENSION and member.size <= _MAX_LABEL_BYTES:
                    text = tar.extractfile(member).read()  # type: ignore[union-attr]  # a file: isfile() above
                    try:
                        labels.add(int(text.decode().strip()))
                    except (UnicodeDecodeError, ValueError):
                        pass  # reported per sample when it is read
    except (tarfile.TarError, EOFError, OSError) as err:
        raise ValueError(f"{path}: unreadable shard ({err})") from None
    return count, {label for label in labels if label >= 0}

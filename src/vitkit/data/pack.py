"""Writing any source as WebDataset shards or a Hugging Face dataset (`vitkit data pack`), and describing and
checking one (`vitkit data info`).

Images keep their encoded bytes when the source has them (files, Arrow rows, shard members): packing re-encodes
nothing, so a folder of JPEGs packs to the same JPEG bytes. In-memory datasets are written as PNG (lossless):
their packed copies train bitwise like the original (same images, same order, same indices).

Shards can be written to a bucket (`--out s3://bucket/dir`, or any URL fsspec writes to): each is written to a
local temporary directory, uploaded when complete and removed, so the local disk holds one shard at a time.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from vitkit.storage import atomic_write_text

from .decode import ImageDecodeError, decode_image, image_size
from .remote import filesystem, is_url, join
from .shard_index import INFO_NAME, LABEL_EXTENSION
from .shards import UNKNOWN_IMAGE_EXTENSION
from .source import EncodedImage, Source
from .transforms import sample_keys

FORMATS = ("wds", "hf")
SIGNATURES = (
    (b"\x89PNG", "png"), (b"\xff\xd8", "jpg"), (b"RIFF", "webp"), (b"BM", "bmp"), (b"GIF8", "gif"),
    (b"II*\x00", "tif"), (b"MM\x00*", "tif"), (b"P5", "pgm"), (b"P6", "ppm"),
)  # fmt: skip
_SHUFFLE_DOMAIN = 0x7368756666  # "shuff": shard order keys are not augmentation or batch-order keys
SIZE_SAMPLE = 200  # images whose header `data info` reads for the size summary (all with --check)
INCOMPLETE_NAME = ".vitkit-pack-incomplete"  # in an output directory from `pack`'s start until its last write


def extension(data: bytes) -> str:
    """The file extension of encoded image bytes, from their signature (UNKNOWN_IMAGE_EXTENSION if unknown)."""
    return next((ext for signature, ext in SIGNATURES if data.startswith(signature)), UNKNOWN_IMAGE_EXTENSION)


def complete_samples(source: Source, order: list[int] | None = None) -> Iterator[tuple[int, bytes, int]]:
    """encoded_samples with every image and label present (a missing one is a one-line error)."""
    for index, name, data, label in source.encoded_samples(order):
        yield index, complete(name, data, label, len(source.classes)), label  # type: ignore[misc]  # checked


def complete(name: str, data: EncodedImage, label: int | None, classes: int) -> bytes:
    """A sample's bytes; ImageDecodeError when its image is missing or too large, or its label missing or out
    of range."""
    if isinstance(data, ImageDecodeError):
        raise data
    if data is None or label is None or not 0 <= label < classes:
        raise ImageDecodeError(f"{name}: image or label missing, or label {label} out of range")
    return data


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OSError raised while writing `path` (a full disk, a quota) names it."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error


def shuffled_order(num_samples: int, seed: int) -> list[int]:
    """A permutation of 0..N-1 keyed by `seed` (the same on every machine): the order shards are written in."""
    return torch.sort(
        sample_keys(torch.arange(num_samples), seed, _SHUFFLE_DOMAIN), stable=True
    ).indices.tolist()


@dataclass
class Packed:
    """What `pack` wrote for one split."""

    split: str
    images: int
    files: list[Path | str] = field(default_factory=list)  # local paths or URLs
    shards: list[dict] = field(default_factory=list)  # {"name", "images"} of each shard (wds)
    bytes: int = 0


def write_shards(
    source: Source,
    split: str,
    out: Path,
    shard_images: int,
    seed: int | None = None,
    finished: Callable[[Path], Path | str] = lambda path: path,
) -> Packed:
    """`split` as out/<split>-NNNNNN.tar of `shard_images` samples each (<key>.<ext> image + <key>.cls label, the
    key the sample's index in the source), in the source's order or, with a `seed`, shuffled (shards of an
    indexable source). Each shard, once complete, is handed to `finished`, which says where it now is."""
    packed = Packed(split, 0)
    order = None if seed is None or not source.indexable else shuffled_order(len(source), seed)
    tar, count, current = None, 0, out
    progress = tqdm(total=len(source), desc=f"pack {split}", unit="img", dynamic_ncols=True)

    def close() -> None:
        nonlocal tar
        assert tar is not None
        with writing(current):
            tar.close()
        tar = None
        packed.bytes += current.stat().st_size
        packed.files.append(finished(current))
        packed.shards.append({"name": current.name, "images": count})

    try:
        for index, data, label in complete_samples(source, order):
            if tar is None or count == shard_images:
                if tar is not None:
                    close()
                current = out / f"{split}-{len(packed.shards):06d}.tar"
                tar, count = tarfile.open(current, "w", format=tarfile.USTAR_FORMAT), 0
            key = f"{index:09d}"
            for name, payload in (
                (f"{key}.{extension(data)}", data),
                (f"{key}.{LABEL_EXTENSION}", b"%d" % label),
            ):
                member = tarfile.TarInfo(name)
                member.size, member.mtime, member.mode = len(payload), 0, 0o644  # byte-reproducible shards
                with writing(current):
                    tar.addfile(member, io.BytesIO(payload))
            count += 1
            packed.images += 1
            progress.update()
        if tar is not None:
            close()
    finally:
        progress.close()
        if tar is not None:  # an error part-way: the shard closed, not handed on
            tar.close()
    return packed


def write_hf(sources: dict[str, Source], classes: list[str], out: Path) -> list[Packed]:
    """The splits as one `datasets` DatasetDict saved with save_to_disk (Image + ClassLabel columns)."""
    import datasets  # optional: only the hf format needs it

    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    scratch = out / ".pack-cache"
    splits, packed = {}, []

    def rows(split: str):
        source = sources[split]
        with tqdm(total=len(source), desc=f"pack {split}", unit="img", dynamic_ncols=True) as progress:
            for _, data, label in complete_samples(source):
                progress.update()
                yield {"image": {"bytes": data, "path": None}, "label": label}

    with writing(out):
        for split in sources:
            splits[split] = datasets.Dataset.from_generator(
                rows, gen_kwargs={"split": split}, features=features, cache_dir=str(scratch)
            )
            packed.append(Packed(split, len(splits[split])))
        datasets.DatasetDict(splits).save_to_disk(str(out))
    shutil.rmtree(scratch, ignore_errors=True)
    for item in packed:
        item.files = list(sorted((out / item.split).glob("*.arrow")))
        item.bytes = sum(path.stat().st_size for path in (out / item.split).glob("*.arrow"))
    return packed


def pack(
    sources: dict[str, Source], out: Path | str, fmt: str, shard_images: int = 1000, seed: int | None = None
) -> list[Packed]:
    """Write every split of `sources` to `out` (a directory, or a URL for wds) as `fmt` ('wds' or 'hf'); `out`
    must not exist or be empty. Shards are written in a shuffled order keyed by `seed` (None: the source's order);
    HF datasets keep it. Until the last write, `out` holds INCOMPLETE_NAME: an interrupted pack is recognised and
    named as such."""
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {FORMATS}, got {fmt!r}")
    if shard_images < 1:
        raise ValueError(f"--shard-images must be positive, got {shard_images}")
    if isinstance(out, str) and is_url(out):
        return pack_to_url(sources, out, fmt, shard_images, seed)
    out = Path(out)
    if (out / INCOMPLETE_NAME).exists():
        raise ValueError(
            f"{out}: left by an interrupted `vitkit data pack` (it holds {INCOMPLETE_NAME}); it can be removed: "
            f"`rm -r {out}` and pack again"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: not empty; pack writes into a new or empty directory")
    classes = next(iter(sources.values())).classes
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        (out / INCOMPLETE_NAME).touch()
    if fmt == "hf":
        packed = write_hf(sources, classes, out)
    else:
        packed = [write_shards(source, split, out, shard_images, seed) for split, source in sources.items()]
        info = {"classes": classes, "splits": {p.split: {"shards": p.shards} for p in packed}}
        atomic_write_text(out / INFO_NAME, json.dumps(info, indent=1) + "\n")
    (out / INCOMPLETE_NAME).unlink()
    return packed


def pack_to_url(
    sources: dict[str, Source], out: str, fmt: str, shard_images: int, seed: int | None
) -> list[Packed]:
    """pack() into a bucket: each shard staged in a local temporary directory, uploaded, removed; dataset.json
    last, and INCOMPLETE_NAME in `out` until then."""
    if fmt != "wds":
        raise ValueError(f"{out}: --format {fmt} writes a local directory; a URL takes --format wds")
    fs, root = filesystem(out)
    marker = f"{root}/{INCOMPLETE_NAME}"
    if fs.exists(marker):
        raise ValueError(
            f"{out}: left by an interrupted `vitkit data pack` (it holds {INCOMPLETE_NAME}); remove it and pack again"
        )
    if fs.exists(root) and fs.find(root, maxdepth=1):
        raise ValueError(f"{out}: not empty; pack writes into a new or empty location")
    fs.pipe_file(marker, b"")

    def upload(path: Path) -> str:
        url = join(out, path.name)
        with writing(path):
            fs.put_file(str(path), f"{root}/{path.name}")
        path.unlink()
        return url

    classes = next(iter(sources.values())).classes
    with tempfile.TemporaryDirectory(prefix="vitkit-pack-") as staging:
        packed = [
            write_shards(source, split, Path(staging), shard_images, seed, finished=upload)
            for split, source in sources.items()
        ]
    info = {"classes": classes, "splits": {p.split: {"shards": p.shards} for p in packed}}
    fs.pipe_file(f"{root}/{INFO_NAME}", (json.dumps(info, indent=1) + "\n").encode())
    fs.rm_file(marker)
    return packed


@dataclass
class Summary:
    """What `data info` found in one split."""

    split: str
    description: str
    reader: str
    images: int
    per_class: dict[str, int]
    sizes: Counter = field(default_factory=Counter)
    measured: int = 0
    unreadable: list[str] = field(default_factory=list)


def summarise(source: Source, split: str, check: bool) -> Summary:
    """Images per class, image sizes (headers of SIZE_SAMPLE images spread over the split, or all with
    `check`), and with `check` every image decoded and the unreadable ones listed. A stream is read whole (its
    labels are in the shards); an indexable source's labels are known, and only its measured images are read."""
    summary = Summary(split, source.description, source.reader, len(source), {})
    every = 1 if check else max(1, len(source) // SIZE_SAMPLE)
    if source.indexable:
        counts = np.bincount(source.labels.numpy(), minlength=len(source.classes))
        order: list[int] | None = list(range(0, len(source), every))
    else:
        counts, order = np.zeros(len(source.classes), dtype=np.int64), None
    if source.image_size is not None:  # decoded already: one size, every image readable
        summary.sizes[source.image_size] = summary.measured = len(source)
        order = []
    samples = tqdm(source.encoded_samples(order), total=len(source) if order is None else len(order),
                   desc=f"info {split}", unit="img", disable=source.indexable and not check)  # fmt: skip
    try:
        for index, name, member, label in samples:
            try:
                data = complete(name, member, label, len(source.classes))
            except ImageDecodeError as err:
                summary.unreadable.append(str(err))
                continue
            if not source.indexable:
                counts[label] += 1
            if index % every == 0:
                _measure(summary, data, name, check)
    except ValueError as err:  # a shard that ends early: listed, the rest of the split not read
        summary.unreadable.append(str(err))
    summary.per_class = {name: int(n) for name, n in zip(source.classes, counts, strict=True)}
    return summary


def _measure(summary: Summary, data: bytes, name: str, decode: bool) -> None:
    """Count one image's size from its header (and decode it fully when `decode`); an unreadable one is listed."""
    try:
        width, height = image_size(data, name=name)
        if decode:
            decode_image(data, name=name)
    except ImageDecodeError as err:
        summary.unreadable.append(str(err))
        return
    summary.sizes[(width, height)] += 1
    summary.measured += 1

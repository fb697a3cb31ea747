"""WebDataset tar shards read as streams: vitkit's DIR/<split>-NNNNNN.tar plus DIR/dataset.json (classes, images
per shard), or shards as other tools write them (a directory per split, brace patterns: vitkit.data.shard_index).

A sample is the tar members sharing a key (the member name up to its first dot): an image (`.jpg`, `.png`, ...)
and its class index (`.cls`, text), the WebDataset layout, so shards written by `vitkit data pack` are read by
the `webdataset` package and the other way round. Reading uses Python's tarfile: a shard is read front to
back once (the members nobody uses seeked over), which is what object stores and network filesystems serve
well, and the shard split, shuffle and resume position below are ours to define exactly (the `webdataset`
package's pipeline draws from its own random state, which would have to be pinned and checkpointed to give the
same guarantees).

Training (ShardSteps): each epoch shuffles the shard order with a key of (seed, epoch) and deals the shards to
R x W streams (R ranks x W DataLoader workers, W >= 1), stream j getting shards j, j + RW, ... of that order.
Each stream passes its samples through a shuffle buffer keyed to (seed, epoch, stream) and cuts them into
rank-sized batches; every stream yields the same number of batches per epoch (what its smallest possible share
of shards holds), so steps alternate over the W streams of a rank in a fixed order. The samples of step s are
therefore a function of (seed, step, R, W): a run resumed with the same number of ranks and workers reads exactly
the batches of the uninterrupted run (each stream re-reads its shards up to the resume point without decoding
them); a resume with another R x W is refused. Augmentation is keyed by each sample's index in the split.

Shards at a URL (s3://, gs://, https://: vitkit.data.remote) are read the same way, from a local copy of each
fetched whole while the stream reads the shard before it, and checked against the size and ETag they were
indexed at: the bytes a stream reads, and so its batches, are those of the same shards on local disk.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from .batch import Batch
from .decode import IMAGE_EXTENSIONS, ImageDecodeError, check_byte_size, decode_image
from .read_ahead import ReadAhead, RecentShard
from .remote import RemoteShard
from .shard_index import INFO_NAME, LABEL_EXTENSION, find_shards
from .source import DEFAULT_READING, EncodedImage, ReadOptions, StepPlan
from .transforms import eval_transform, key, sample_keys
from .workers import LoaderSteps, loader_batches

UNKNOWN_IMAGE_EXTENSION = "img"  # the member name `vitkit data pack` gives bytes of no known image signature
MEMBER_EXTENSIONS = (
    *(extension[1:] for extension in IMAGE_EXTENSIONS),
    UNKNOWN_IMAGE_EXTENSION,
)
LABEL_PATTERN = re.compile(rb"\s*([0-9]{1,18})\s*")  # ASCII digits only: int() would take "٢" and "0_1"
MAX_LABEL_BYTES = 64
SHUFFLE_BUFFER = 256  # samples (encoded bytes) held per stream for shuffling
_SHARD_ORDER_DOMAIN = 0x7368617264  # "shard"
_BUFFER_DOMAIN = 0x627566  # "buf"


class ShardSource:
    """One split of a shard directory: its shards, image counts, labels' classes; samples are read as streams
    (not indexable), in DataLoader workers as `options` say."""

    reader = "WebDataset tar shards, streamed (tarfile), decoded per sample"
    indexable = False
    image_size = None  # known only by decoding

    def __init__(
        self, directory: str | os.PathLike, split: str, options: ReadOptions = DEFAULT_READING
    ) -> None:
        index = find_shards(directory, split)
        self.paths = index.paths
        self.counts = np.array(index.counts, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])  # index of each shard's first sample
        self.classes = index.classes
        self.split = index.split
        self.description = (
            f"WebDataset shards {index.location} [{index.split}] ({len(self.paths)} shards, "
            f"{int(self.offsets[-1])} images, {len(self.classes)} classes, streamed)"
        )
        self.options = options
        self.recent = RecentShard()  # reading by position (evaluation): the remote shard fetched last

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def labels(self) -> torch.Tensor:
        """Not known without reading every shard: what needs per-sample labels needs an indexable source."""
        raise self._not_indexable("per-sample labels")

    def read(self, index: int, channels: int = 3) -> torch.Tensor:
        raise self._not_indexable("reading a sample by its index")

    def select(self, indices: torch.Tensor, description: str) -> ShardSource:
        raise self._not_indexable("a subset")

    def _not_indexable(self, what: str) -> ValueError:
        return ValueError(
            f"{self.description} is read as a stream; {what} (data.train_subset, data.val_split, few-shot) "
            "needs an indexable data.source (in memory, folder:, hf:)"
        )

    def to_device(self, device: torch.device) -> ShardSource:
        return self  # decoded per batch, in the workers

    def streams(self, world_size: int) -> int:
        """Ranks x workers (at least one a rank): the batches of a step depend on it (ShardSteps)."""
        return world_size * max(self.options.workers, 1)

    def train_steps(self, plan: StepPlan) -> LoaderSteps:
        per_epoch = ShardSteps(self, plan, 0).per_epoch  # checks the shards can feed every stream
        return LoaderSteps(lambda start: ShardSteps(self, plan, start), per_epoch, self.options, plan.device)

    def eval_batches(
        self, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int, device: torch.device
    ) -> Iterator[Batch]:
        """Contiguous index ranges, read from the shards that hold them."""
        preprocess = lambda x: eval_transform(x, img_size, in_chans)  # noqa: E731
        items = ShardChunks(self, chunks, preprocess, (in_chans, *img_size))
        return loader_batches(items, len(chunks), self.options, device)

    def encoded_samples(
        self, order: list[int] | None = None
    ) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        """Every sample in shard order (a stream: `order` does not apply)."""
        shards = list(range(len(self.paths)))
        for shard, file in zip(shards, self.fetched_ahead(shards), strict=True):
            yield from self.samples(shard, file)

    def fetched_ahead(self, shards: list[int]) -> Iterator[IO[bytes] | None]:
        """Per shard, in order: None for a local one (read where it is), the fetched copy of a remote one while
        the next one is fetched (vitkit.data.read_ahead.ReadAhead)."""
        paths = [self.paths[shard] for shard in shards]
        remote = [path for path in paths if isinstance(path, RemoteShard)]
        return iter(ReadAhead(remote)) if remote else iter([None] * len(paths))

    def samples(
        self, shard: int, file: IO[bytes] | None = None
    ) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        """(index in the split, member name, image bytes (None when missing, an ImageDecodeError when too
        large), label or None) of each sample of a shard, in order; a shard shorter than dataset.json says, or not
        a tar file, raises a one-line ValueError. Only image and label members are read into memory, each after
        its size is checked: the stream passes over any other member. A remote shard is read from `file`, its
        fetched copy, or fetched now."""
        path = self.paths[shard]
        count, first = int(self.counts[shard]), int(self.offsets[shard])
        position = 0
        if isinstance(path, RemoteShard) and file is None:
            file = self.recent.open(path)
        try:
            # Read in order, member after member; the data of a member nobody uses is seeked over, not read.
            with open_tar(path, file) as tar:
                current, image, label = None, None, None
                for member in tar:
                    if not member.isfile():
                        continue
                    stem, _, extension = os.path.basename(member.name).partition(".")
                    sample = f"{os.path.dirname(member.name)}/{stem}"
                    if sample != current and current is not None:
                        yield first + position, f"{path}:{current}", image, label
                        position += 1
                        image, label = None, None
                    current = sample
                    if extension.lower() in MEMBER_EXTENSIONS:
                        image = read_member(tar, member, f"{path}:{member.name}")
                    elif extension == LABEL_EXTENSION and member.size <= MAX_LABEL_BYTES:
                        label = parse_label(read_member(tar, member, f"{path}:{member.name}"))
                if current is not None:
                    yield first + position, f"{path}:{current}", image, label
                    position += 1
        except (tarfile.TarError, EOFError, OSError, ValueError) as err:
            raise ValueError(f"{path}: unreadable shard after {position} of {count} images ({err})") from None
        if position != count:
            raise ValueError(f"{path}: shard ends after {position} of the {count} images {INFO_NAME} lists")

    def decode(self, name: str, image: EncodedImage, label: int | None, channels: int) -> torch.Tensor:
        """A sample's pixels; ImageDecodeError when its image is missing, undecodable or its label is bad."""
        if isinstance(image, ImageDecodeError):
            raise image
        if image is None:
            raise ImageDecodeError(f"{name}: no image member ({', '.join(MEMBER_EXTENSIONS)})")
        if label is None or not 0 <= label < len(self.classes):
            raise ImageDecodeError(
                f"{name}: label {label} missing or out of range for {len(self.classes)} classes"
            )
        return decode_image(image, name=name, channels=channels)


def open_tar(path: Path | RemoteShard, fetched: IO[bytes] | None) -> tarfile.TarFile:
    """A shard's tar reader: on the local file itself, or on a remote shard's fetched copy."""
    if isinstance(path, RemoteShard):
        return tarfile.open(fileobj=fetched, mode="r:*")
    return tarfile.open(path, "r:*")


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> bytes | ImageDecodeError:
    """A member's bytes, or (unread) the ImageDecodeError of one above the byte limit."""
    try:
        check_byte_size(member.size, name)
    except ImageDecodeError as error:
        return error
    return tar.extractfile(member).read()  # type: ignore[union-attr]  # a regular file: samples() checks


def parse_label(data: bytes | ImageDecodeError) -> int | None:
    """A `.cls` member's class index (ASCII digits); None (reported per sample by decode) for anything else."""
    match = LABEL_PATTERN.fullmatch(data) if isinstance(data, bytes) else None
    return int(match[1]) if match else None


def stream_batches_per_epoch(source: ShardSource, streams: int, batch: int) -> int:
    """Batches every stream yields per epoch: what the smallest share of floor(S / streams) shards holds."""
    share = len(source.paths) // streams
    if share == 0:
        raise ValueError(
            f"{len(source.paths)} shard(s) cannot feed {streams} streams (ranks x data.workers); write at least "
            f"{streams} shards (vitkit data pack --shard-images)"
        )
    per_stream = int(np.sort(source.counts)[:share].sum()) // batch
    if per_stream == 0:
        raise ValueError(f"a stream of {share} shard(s) holds fewer images than a rank's batch of {batch}")
    return per_stream


class ShardSteps(IterableDataset):
    """This rank's batches of steps start..stop-1 from shard streams; DataLoader worker i serves the steps
    start + i, start + i + W, ... (and so always the same stream)."""

    def __init__(self, source: ShardSource, plan: StepPlan, start: int) -> None:
        self.source, self.transform, self.seed, self.start, self.stop = (
            source,
            plan.transform,
            plan.seed,
            start,
            plan.steps,
        )
        self.rank, self.world_size, self.shape = plan.rank, plan.world_size, plan.shape
        self.batch = plan.batch_size // plan.world_size  # this rank's share of a step
        self.workers = max(source.options.workers, 1)
        self.per_epoch = self.workers * stream_batches_per_epoch(
            source, plan.world_size * self.workers, self.batch
        )

    def stream(self, epoch: int, slot: int) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        """Stream `slot` (of ranks x workers) of an epoch: its shards in order, through the keyed shuffle buffer."""
        streams = self.world_size * self.workers
        order = torch.sort(sample_keys(torch.arange(len(self.source.paths)), self.seed, epoch, _SHARD_ORDER_DOMAIN),
                           stable=True).indices.tolist()  # fmt: skip
        rng = np.random.default_rng(key(self.seed, epoch, slot, _BUFFER_DOMAIN))
        buffer: list = []
        shards = order[slot::streams]
        for shard, file in zip(shards, self.source.fetched_ahead(shards), strict=True):
            for sample in self.source.samples(shard, file):
                if len(buffer) < SHUFFLE_BUFFER:
                    buffer.append(sample)
                    continue
                pick = int(rng.integers(len(buffer)))
                buffer[pick], sample = sample, buffer[pick]
                yield sample
        while buffer:
            yield buffer.pop(int(rng.integers(len(buffer))))

    def __iter__(self) -> Iterator:
        worker = get_worker_info()
        first = self.start + (worker.id if worker is not None else 0)
        stream, stream_epoch, consumed = None, -1, 0
        channels = 1 if self.shape[0] == 1 else 3
        for step in range(first, self.stop, self.workers):
            epoch, position = divmod(step, self.per_epoch)
            slot = self.rank * self.workers + position % self.workers
            wanted = (position // self.workers) * self.batch  # samples this stream used before this step
            if epoch != stream_epoch:
                stream, stream_epoch, consumed = self.stream(epoch, slot), epoch, 0
            images, labels, indices, skipped = [], [], [], []
            try:
                assert stream is not None  # opened at the first step
                # A resume: pass over what was trained on, without decoding.
                for _ in range(wanted - consumed):
                    next(stream)
                for _ in range(self.batch):
                    index, name, data, label = next(stream)
                    try:
                        image = self.source.decode(name, data, label, channels)
                    except ImageDecodeError as err:
                        skipped.append(str(err))
                        continue
                    images.append(image)
                    labels.append(label)
                    indices.append(index)
            # A shard that ends early or is not a tar file: one line in the main process.
            except ValueError as err:
                yield Batch(torch.empty(0, *self.shape), torch.empty(0, dtype=torch.int64), torch.empty(0), step,
                            error=str(err))  # fmt: skip
                return
            consumed = wanted + self.batch
            # Augmented in one call, each sample keyed by (seed, epoch, index) as in any other source.
            index_tensor = torch.tensor(indices, dtype=torch.int64)
            stacked = (
                self.transform.augment(images, index_tensor, epoch) if images else torch.empty(0, *self.shape)
            )
            yield Batch(stacked, torch.tensor(labels, dtype=torch.int64), index_tensor, step, skipped)


class ShardChunks(Dataset):
    """Item k: the samples of the contiguous index range `chunks[k]` (evaluation), preprocessed."""

    def __init__(
        self, source: ShardSource, chunks: list[torch.Tensor], preprocess, shape: tuple[int, ...]
    ) -> None:
        self.source, self.chunks, self.preprocess, self.shape = source, chunks, preprocess, shape

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, k: int) -> Batch:
        chunk = self.chunks[k]
        images, labels, indices, skipped = [], [], [], []
        channels = 1 if self.shape[0] == 1 else 3
        if len(chunk):
            begin, end = int(chunk[0]), int(chunk[-1]) + 1
            shard = int(np.searchsorted(self.source.offsets, begin, side="right")) - 1
            try:
                while shard < len(self.source.paths) and self.source.offsets[shard] < end:
                    for index, name, data, label in self.source.samples(shard):
                        if index < begin:
                            continue
                        if index >= end:
                            break
                        try:
                            image = self.source.decode(name, data, label, channels)
                        except ImageDecodeError as err:
                            skipped.append(str(err))
                            continue
                        images.append(self.preprocess(image[None])[0])
                        labels.append(label)
                        indices.append(index)
                    shard += 1
            except ValueError as err:
                return Batch(torch.empty(0, *self.shape), torch.empty(0, dtype=torch.int64), chunk[:0], -1,
                             error=str(err))  # fmt: skip
        stacked = torch.stack(images) if images else torch.empty(0, *self.shape)
        return Batch(stacked, torch.tensor(labels, dtype=torch.int64), torch.tensor(indices, dtype=torch.int64),
                     -1, skipped)  # fmt: skip

"""Fetched remote shards held while they are read: the next shard of a stream fetched in a thread while the
current one is read (the network stays off a step's path), and the last shard read by position kept for the
next range of the same shard."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

from .remote import Patience, RemoteShard, fetch


class ReadAhead:
    """The fetched files of `shards` in order, the next one fetched in a thread while the current one is read;
    each file is closed (and deleted) once the next is asked for, or when the iteration is closed."""

    def __init__(self, shards: list[RemoteShard], patience: Patience | None = None) -> None:
        self.shards, self.patience = shards, patience

    def __iter__(self) -> Iterator[IO[bytes]]:
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vitkit-shard-fetch")
        pending: Future[IO[bytes]] | None = None
        current: IO[bytes] | None = None
        try:
            for k in range(len(self.shards)):
                if pending is None:
                    pending = pool.submit(fetch, self.shards[k], self.patience, stop)
                ready = pending.result()
                pending = (
                    pool.submit(fetch, self.shards[k + 1], self.patience, stop)
                    if k + 1 < len(self.shards)
                    else None
                )
                if current is not None:
                    current.close()
                current = ready
                yield current
        finally:
            stop.set()
            if current is not None:
                current.close()
            if pending is not None:
                pending.add_done_callback(_close_result)
            pool.shutdown(wait=False)


def _close_result(future: Future[IO[bytes]]) -> None:
    if future.exception() is None:
        future.result().close()


class RecentShard:
    """The last shard fetched for reading by position (evaluation), kept for the next range of the same shard."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.file: IO[bytes] | None = None

    def open(self, shard: RemoteShard) -> IO[bytes]:
        if self.url != shard.url or self.file is None:
            if self.file is not None:
                self.file.close()
            self.file, self.url = None, None  # a failed fetch leaves nothing half-kept
            self.file, self.url = fetch(shard), shard.url
        self.file.seek(0)
        return self.file

    def __getstate__(self) -> dict[str, Any]:
        return {"url": None, "file": None}  # a worker process fetches its own

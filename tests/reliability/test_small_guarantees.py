"""The smaller guarantees: an absurd step count refused before a run directory exists, identical safetensors
bytes from identical saves, a DataLoader worker's error as one line, names users control drawn safely."""

from __future__ import annotations

import hashlib
import multiprocessing

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tiny_run import TINY
from vitkit import cli
from vitkit.data import ReadOptions
from vitkit.data.workers import LoaderSteps, loader_batches, next_batch
from vitkit.evaluate.confusion import plot_confusion
from vitkit.storage import save_state_dict


def test_an_absurd_step_count_is_one_line_and_leaves_no_run_directory(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", "--out", str(out), *TINY, "train.steps=99999999999999999999"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.steps must be <= 2**53" in err, err
    assert not out.exists()


def test_identical_saves_write_identical_bytes(tmp_path) -> None:
    """safetensors keeps its metadata in a hash map whose order changes from one save to the next."""
    tensors = {"b": torch.ones(3), "a": torch.zeros(2, dtype=torch.float16)}
    metadata = {"library": "vitkit", "format": "pt", "z": "1", "k": "v"}
    digests = set()
    for _ in range(16):
        save_state_dict(tensors, tmp_path / "w.safetensors", metadata=metadata)
        digests.add(hashlib.sha256((tmp_path / "w.safetensors").read_bytes()).hexdigest())
    assert len(digests) == 1


class Failing(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int):
        raise RuntimeError(f"item {index} broke\nwith a second line")


def test_a_worker_error_reaches_the_main_process_as_one_line() -> None:
    stream = iter(DataLoader(Failing(), batch_size=None, num_workers=1))
    try:
        with pytest.raises(RuntimeError) as raised:
            next_batch(stream)
    finally:
        # The error's traceback holds the iterator: left to the garbage collector, a later test would wait the
        # 5 s of torch's worker-join timeout.
        stream._shutdown_workers()
    message = "RuntimeError: item 0 broke with a second line (RuntimeError in DataLoader worker process 0)"
    assert str(raised.value) == message


def test_a_failed_batch_stops_the_loader_workers_at_once() -> None:
    """The error's traceback still holds the loader's iterator; its workers must not wait for the process's exit
    (and torch's 5 s join timeout there)."""
    options, cpu = ReadOptions(workers=1), torch.device("cpu")
    steps = LoaderSteps(lambda start: Failing(), 2, options, cpu)
    with pytest.raises(RuntimeError, match="item 0 broke"):
        steps(0)
    assert not multiprocessing.active_children()
    with pytest.raises(RuntimeError, match="item 0 broke"):
        next(loader_batches(Failing(), 2, options, cpu))
    assert not multiprocessing.active_children()


def test_names_users_control_are_drawn(tmp_path) -> None:
    """A folder name that is not UTF-8 (a surrogate in Python), mathtext, a lone surrogate."""
    names = ["a\udcffb", "$x^", "\ud800"]
    path = plot_confusion(torch.eye(3, dtype=torch.int64), names, tmp_path / "c.png", "test $ \udcff")
    assert path.stat().st_size > 0

"""The smaller guarantees: an absurd step count refused before a run directory exists, identical safetensors
bytes from identical saves, a DataLoader worker's error as one line, names users control drawn safely; the Python
API's bad arguments as one-line errors naming them, its quiet=True silent, its train.processes started as the command line starts them."""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import vitkit
from command_lines import api_sections, resolve
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.api import ProcessesFailed
from vitkit.data import ReadOptions
from vitkit.data.workers import LoaderSteps, loader_batches, next_batch
from vitkit.evaluation.confusion import plot_confusion
from vitkit.storage import load_state_dict, save_state_dict


def test_an_absurd_step_count_is_one_line_and_leaves_no_run_directory(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", "--out", str(out), *TINY_RECIPE, "train.steps=99999999999999999999"]) == 2
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


def test_tensors_sharing_storage_are_written_each_with_its_own_values(tmp_path) -> None:
    """safetensors refuses aliases: tied weights, views of one buffer and transposes are written as copies."""
    buffer = torch.arange(12.0)
    tensors = {
        "a": buffer,
        "tied": buffer,
        "view": buffer[2:6],
        "t": buffer.view(3, 4).t(),
        "empty": torch.ones(0),
    }
    save_state_dict(tensors, tmp_path / "w.safetensors")
    loaded = load_state_dict(tmp_path / "w.safetensors")
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())


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


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory) -> tuple[Path, str]:
    """A two-step run trained by vitkit.train(quiet=True), and what it printed (stdout and stderr)."""
    out, printed = tmp_path_factory.mktemp("api") / "run", io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stdout(printed),
        contextlib.redirect_stderr(printed),
    ):
        patch.setenv("VITKIT_EMBEDDED", "1")  # module scope: the autouse fixtures do not apply yet
        vitkit.train(
            out=out, quiet=True, **api_sections([*TINY_RECIPE, "train.steps=2", "optim.warmup_steps=1"])
        )
    return out, printed.getvalue()


def test_quiet_training_in_python_prints_nothing(quiet_run) -> None:
    run, printed = quiet_run
    assert printed == "" and (run / "report.json").is_file() and (run / "metrics.jsonl").read_text()


def test_quiet_training_on_the_command_line_prints_nothing(tmp_path, capfd, measuring_precision) -> None:
    """Not even the announcement of `auto`'s measurement."""
    settings = [*TINY_RECIPE, "train.steps=2", "optim.warmup_steps=1", "train.precision=auto"]
    assert cli.main(["train", "--quiet", "--out", str(tmp_path / "run"), *settings]) == 0
    assert capfd.readouterr() == ("", "") and (tmp_path / "run" / "report.json").is_file()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a whole number >= 1, got 0"),
        ({"batch_size": 2.5}, "batch_size must be a whole number >= 1, got 2.5"),
        ({"data": 3}, "data must name a source (e.g. 'cifar10', 'folder:PATH', 'hf:PATH'), got 3"),
    ],
)
def test_bad_evaluate_arguments_are_one_line_errors_naming_them(quiet_run, arguments, message) -> None:
    with pytest.raises(ValueError) as raised:
        vitkit.evaluate(quiet_run[0], **arguments)
    assert str(raised.value) == message


def test_processes_start_alike_from_python_and_the_command_line(tmp_path, monkeypatch) -> None:
    """train.processes=2 from vitkit.train() starts 2 processes as `vitkit train` does: the launcher gets the same
    count, threads and a command line that resolves to the same recipe, quiet when the call is, and what started
    them for run.json; a failed process is the command's exit code, and ProcessesFailed from Python."""
    launched, started = [], []

    def launcher(processes: int, threads: int, argv: list[str], started_by: list[str]) -> int:
        launched.append((processes, threads, resolve([word for word in argv if word != "--quiet"]).to_dict()))
        started.append((started_by, "--quiet" in argv))
        return 3

    monkeypatch.setattr("vitkit.api.launch_processes", launcher)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    settings = [*TINY_RECIPE, "train.processes=2", "train.steps=5"]
    assert cli.main(["train", "--out", str(tmp_path / "cli"), *settings]) == 3
    with pytest.raises(ProcessesFailed, match="status 3"):
        vitkit.train(out=tmp_path / "cli", quiet=True, **api_sections(settings))
    assert len(launched) == 2 and launched[0] == launched[1] and launched[0][:2] == (2, 1)
    assert started[0] == (["vitkit", "train", "--out", str(tmp_path / "cli"), *settings], False)
    assert started[1][0][0].startswith("vitkit.train(out=") and started[1][1]
    assert not (tmp_path / "cli").exists()

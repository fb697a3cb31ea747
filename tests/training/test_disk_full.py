"""A full disk, by fault injection: one line naming the device, the file and the last good checkpoint; the partial
files removed; exit 1; a resume after space is freed ends bitwise equal to an uninterrupted run."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
import torch

from vitkit import cli, storage
from vitkit.storage import load_state_dict
from vitkit.training import checkpoint as ckpt

STEPS = ["--steps", "6", "--checkpoint-every", "2"]


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def leftovers(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.name.startswith(".tmp-") or p.name.endswith(".tmp")]


def fail_checkpoint(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """torch.save of checkpoint `step`'s optimizer state raises ENOSPC, as a full disk would."""
    real_save = torch.save

    def save(obj, path, *args, **kwargs):
        if f"step_{step:08d}" in str(path):
            # half a file first, as a real full disk leaves it
            Path(path).write_bytes(b"\0" * 100)
            no_space()
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def test_a_full_disk_during_a_checkpoint_is_one_line_and_leaves_no_partial_files(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tiny_recipe: tuple[str, ...],
) -> None:
    run = tmp_path / "run"
    fail_checkpoint(monkeypatch, 4)
    assert cli.main(["train", "--out", str(run), *STEPS, *tiny_recipe]) == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "Traceback" not in error
    written = run / ckpt.CHECKPOINT_DIR / "step_00000004"
    assert (
        f"no space left on {storage.device_of(run)} writing {written}; last good checkpoint: step 2" in error
    )
    assert not leftovers(run) and not written.exists()
    assert [p.name for p in ckpt.checkpoint_dirs(run)] == ["step_00000002"]


def test_a_full_disk_during_the_final_write_names_the_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tiny_recipe: tuple[str, ...],
) -> None:
    run = tmp_path / "run"
    real = storage.save_file

    def save_file(tensors, path, *args, **kwargs):
        (no_space if "final" in str(path) else real)(tensors, path, *args, **kwargs)

    monkeypatch.setattr(storage, "save_file", save_file)
    assert cli.main(["train", "--out", str(run), *STEPS, *tiny_recipe]) == 1
    error = capsys.readouterr().err.strip()
    assert error.endswith(f"writing {run / 'final' / 'model.safetensors'}; last good checkpoint: step 6")
    assert not leftovers(run)


@pytest.mark.slow
def test_resume_after_a_full_disk_is_bitwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_recipe: tuple[str, ...]
) -> None:
    reference, run = tmp_path / "reference", tmp_path / "run"
    assert cli.main(["train", "--out", str(reference), *STEPS, *tiny_recipe]) == 0
    with monkeypatch.context() as patch:
        fail_checkpoint(patch, 4)
        assert cli.main(["train", "--out", str(run), *STEPS, *tiny_recipe]) == 1
    assert cli.main(["train", "--out", str(run), "--resume"]) == 0
    for name in ("final/model.safetensors", "checkpoints/step_00000006/model.safetensors"):
        a, b = load_state_dict(reference / name), load_state_dict(run / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert not leftovers(run)
    shutil.rmtree(tmp_path)


def test_disk_full_is_recognised_however_a_library_words_it(tmp_path: Path) -> None:
    assert storage.is_disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    safetensors_words = 'IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
    assert storage.is_disk_full(RuntimeError(safetensors_words), tmp_path)
    assert not storage.is_disk_full(RuntimeError("[enforce fail] unexpected pos 616832 vs 616724"), tmp_path)
    assert not storage.is_disk_full(ValueError("bad value"), tmp_path)  # this file system is not full

"""A resume reads its checkpoint once: config.json and state.json once (vitkit.training.checkpoint.read_checkpoint,
whose result the model, the precision and the loop share) and each tensor file once."""

import shutil
import sys
from collections import Counter
from pathlib import Path

import vitkit.storage
from vitkit import cli
from vitkit.training import checkpoint

_opened: list[str] | None = None  # the paths opened while a test records them


def _record_opens(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str | Path):
        _opened.append(str(args[0]))


sys.addaudithook(_record_opens)  # audit hooks cannot be removed: this one records only while asked to


def test_a_resume_reads_every_file_of_its_checkpoint_once(tmp_path, tiny_recipe, monkeypatch):
    global _opened
    run = tmp_path / "run"
    args = [
        "--steps",
        "6",
        "--checkpoint-every",
        "4",
        *tiny_recipe,
        "train.ema_decay=0.9",
        "train.keep_checkpoints=2",
    ]
    assert cli.main(["train", "--out", str(run), *args]) == 0
    for stopped_after_step_4 in ("checkpoints/step_00000006", "final"):
        shutil.rmtree(run / stopped_after_step_4)
    (run / "report.json").unlink()
    saved = checkpoint.latest_checkpoint(run)
    assert saved is not None and saved.name == "step_00000004"

    real_load = vitkit.storage.load_file  # safetensors opens its files in Rust, unseen by the audit hook
    safetensors: list[str] = []
    monkeypatch.setattr(vitkit.storage, "load_file", lambda path: safetensors.append(path) or real_load(path))
    _opened = []
    try:
        assert cli.main(["train", "--out", str(run), "--resume"]) == 0
    finally:
        opened, _opened = _opened, None
    reads = Counter(Path(p).name for p in opened + safetensors if Path(p).parent == saved)
    assert reads == {"config.json": 1, "state.json": 1, "model.safetensors": 1, "optimizer.pt": 1,
                     "ema.safetensors": 1}  # fmt: skip

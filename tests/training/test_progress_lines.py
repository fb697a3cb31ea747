"""A run is never silent for long (vitkit.training.progress): a line after the first step, a line at least every
LOG_SECONDS when steps are slow, and a line every LOG_SECONDS while one step (an evaluation, a checkpoint) runs."""

from __future__ import annotations

import time

import pytest

import vitkit
from timestamped import timestamped_output
from tiny import build_tiny_official_vit
from vitkit.training import progress


def test_the_first_step_slow_steps_and_a_long_step_each_get_a_line(monkeypatch, capsys):
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.3)
    bar = progress.Progress(total=100, initial=0, log_every=50)
    try:
        bar.update(1, loss=2.0, lr=0.1, images_per_second=8.0)  # the first step: at once
        bar.update(2, loss=1.9, lr=0.1, images_per_second=8.0)  # a fast one: not yet
        time.sleep(0.35)  # the watcher's poll is ~0.1 s: it may speak first
        bar.update(3, loss=1.8, lr=0.1, images_per_second=8.0)
        time.sleep(1.0)  # one long step: the watcher tells it
    finally:
        bar.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step 1/100  loss 2.0000")
    assert not any(line.startswith("step 2/100") for line in lines)
    assert any(line.startswith("step 3/100") or "since step 2/100" in line for line in lines[1:3])
    assert any("still working:" in line and "since step 3/100" in line for line in lines), lines
    quiet = len(lines)
    time.sleep(0.5)
    assert len(capsys.readouterr().out.splitlines()) == 0 and quiet  # closed: the watcher has stopped


TRIAL = """
import sys, time
import torch
from vitkit import cli
from vitkit.training import progress

progress.LOG_SECONDS = 1.0
step = torch.optim.SGD.step

def slow_step(self, *args, **kwargs):  # every optimizer step takes 2.5 s: a large model on a small CPU
    time.sleep(2.5)
    return step(self, *args, **kwargs)

torch.optim.SGD.step = slow_step
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_slow_stepping_finetune_trial_prints_at_least_every_few_seconds(tmp_path):
    """The acceptance, scaled down: no stretch of a command's output over 30 s without a line (here: none over a
    few LOG_SECONDS, timestamped as the lines arrive), the first step's line within one step of it."""
    vitkit.export_npz(build_tiny_official_vit(num_classes=10), tmp_path / "w.npz")
    argv = ["finetune", "--weights", "w.npz", "--steps", "3", "--batch-size", "8", "--out", "run"]
    argv += ["data.source=synthetic", "model.img_size=32", "train.device=cpu", "train.threads=1"]
    stamped = timestamped_output(TRIAL, argv, tmp_path, timeout=120)
    times = [0.0] + [t for t, _ in stamped]
    first_step = next(t for t, line in stamped if line.startswith("step 1/3"))
    training = [t for t, _ in stamped if t >= first_step - 2.5]  # from the first step on
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < 30, stamped
    assert max(b - a for a, b in zip(training, training[1:], strict=False)) < 4, stamped  # a loaded CPU
    assert any("still working:" in line for _, line in stamped), stamped


def test_a_phase_between_steps_is_named_while_it_runs(monkeypatch, capsys):
    """After the last step an evaluation is told as such, not as time since the step."""
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.2)
    shown = progress.Progress(total=3, initial=0, log_every=1)
    shown.update(3, 0.5, 1e-3, 10.0)
    shown.begin("evaluating 7 test images")
    time.sleep(0.8)
    shown.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "evaluating 7 test images"
    assert any(
        line.startswith("evaluating 7 test images: ") and line.endswith(" s so far") for line in lines[2:]
    )
    assert not any("still working" in line for line in lines)

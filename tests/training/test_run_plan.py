"""A run says how long it will take within its first steps: after step 1, and from steps 2-3 (vitkit.training.progress)."""

from __future__ import annotations

from types import SimpleNamespace

from vitkit.recipe.run_config import TrainSection
from vitkit.training import progress
from vitkit.training.progress import RunLog


def test_the_plan_is_said_after_the_first_step_and_again_from_the_next_two(tmp_path, capsys, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    train = TrainSection(steps=100, batch_size=8, log_every=50)
    log = RunLog(tmp_path, train, 0, False, [])
    for done, seconds in [(1, 30.0), (2, 40.0), (3, 50.0), (4, 60.0)]:
        now[0] = seconds
        log.step(done, [(done, 1.0, 0.1)], [], 0.0)
    log.close()
    plans = [line for line in capsys.readouterr().out.splitlines() if line.startswith("plan:")]
    assert plans == [
        "plan: 100 steps of 8 images; step 1 took 30.00 s: about 49m30s to go",
        "plan: 100 steps of 8 images; steps 2-3 took 10.00 s each: about 16m10s to go",
    ]

"""The metrics of a resumed or restarted run equal those of an uninterrupted one: in metrics.jsonl and in
TensorBoard, whose reader drops the events that a restarted writer purges."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vitkit.training.report import TENSORBOARD_DIR, MetricsLog, read_metrics


def write(run: Path, steps: range, resume_step: int | None = None) -> None:
    log = MetricsLog(run, resume_step=resume_step)
    for step in steps:
        log.log({"step": step, "loss": float(step)})
    log.flush()
    log.close()


def tensorboard_steps(run: Path) -> list[int]:
    events = EventAccumulator(str(run / TENSORBOARD_DIR))
    events.Reload()
    return [event.step for event in events.Scalars("loss")]


def test_a_resumed_log_drops_the_records_after_the_checkpoint(tmp_path):
    write(tmp_path, range(1, 9))  # killed after step 8, last checkpoint at step 5
    write(tmp_path, range(6, 11), resume_step=5)
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(1, 11))
    assert tensorboard_steps(tmp_path) == list(range(1, 11))


def test_a_run_started_again_without_a_checkpoint_drops_every_earlier_record(tmp_path):
    # killed before its first checkpoint, then restarted (torchrun --max-restarts)
    write(tmp_path, range(1, 4))
    write(tmp_path, range(1, 11))
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(1, 11))
    assert tensorboard_steps(tmp_path) == list(range(1, 11))

"""`auto` decides once per machine and call: a measurement is kept in the cache directory for every later process,
and inference of a few images decides without measuring (well under half a second)."""

import json
import time

import pytest
import torch

from tiny import build_tiny_vit
from vitkit import cli, precision, save_pretrained
from vitkit.precision import choose_precision, inference_precision

from .test_policy import AMX_LIKE, fake_cpu, never_measured


@pytest.fixture(autouse=True)
def amx_like(monkeypatch):
    fake_cpu(monkeypatch, AMX_LIKE)


@pytest.fixture
def timed_step(monkeypatch):
    """step(fp32_s, bf16_s, calls): a step that takes exactly that long on a fake clock, whatever the load."""
    now = [0.0]
    monkeypatch.setattr(precision.time, "perf_counter", lambda: now[0])

    def step(fp32_s, bf16_s, calls):
        def run(dtype):
            calls.append(dtype)
            now[0] += bf16_s if dtype == torch.bfloat16 else fp32_s

        return run

    return step


def new_process(monkeypatch) -> None:
    """What a new process starts with: nothing measured in memory."""
    monkeypatch.setattr(precision, "_measured", {})


def tiny_model(**overrides):
    return build_tiny_vit(**{"img_size": 28, **overrides})


def test_a_measurement_is_kept_for_every_later_process(monkeypatch, tmp_path, timed_step):
    first = choose_precision("auto", "cpu", measure=timed_step(0.02, 0.004, []), key=("m", 1), what="a step")
    assert first.name == "bf16" and "measured earlier" not in first.reason
    records = list((tmp_path / "cache" / "precision").glob("*.json"))
    assert len(records) == 1
    saved = json.loads(records[0].read_text())
    assert saved["threads"] == torch.get_num_threads() and saved["bf16_s"] < saved["fp32_s"]
    new_process(monkeypatch)
    again = choose_precision("auto", "cpu", measure=never_measured, key=("m", 1), what="a step")
    assert again.name == "bf16" and f"measured earlier ({records[0]})" in again.reason
    calls = []
    other = choose_precision("auto", "cpu", measure=timed_step(0.004, 0.02, calls), key=("m", 2))
    assert other.name == "fp32" and calls  # another key is measured on its own


def test_the_thread_count_is_part_of_the_key(monkeypatch, restore_threads, timed_step):
    choose_precision("auto", "cpu", measure=timed_step(0.01, 0.002, []), key="k")
    torch.set_num_threads(1 if torch.get_num_threads() > 1 else 2)
    calls = []
    choose_precision("auto", "cpu", measure=timed_step(0.01, 0.002, calls), key="k")
    assert calls  # other threads, other timings: measured again


def test_a_few_images_are_decided_by_rule_without_measuring(monkeypatch):
    model = tiny_model()
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: pytest.fail("measured"))
    start = time.perf_counter()
    chosen = inference_precision("auto", model, 1)
    assert time.perf_counter() - start < 0.5
    assert chosen.name == "fp32" and "not worth a measurement" in chosen.reason
    assert inference_precision("fp32", model, 1).name == "fp32"


def test_a_large_model_is_bf16_by_rule_at_any_batch(monkeypatch):
    """Measuring ViT-B/16 at 384 px would take minutes for an answer known in advance."""
    model = tiny_model()
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: pytest.fail("measured"))
    monkeypatch.setattr(precision, "LARGE_MODEL_PARAMS", 1000)  # the rule's threshold below this model
    for batch in (1, precision.FEW_IMAGES, 64):
        chosen = inference_precision("auto", model, batch)
        assert chosen.name == "bf16" and "gains from bf16" in chosen.reason


def test_a_few_images_use_an_earlier_measurement_of_the_same_call(monkeypatch, timed_step):
    model = tiny_model()
    key = ("inference", precision.model_signature(model), (1, 3, 28, 28), "cpu")
    choose_precision("auto", "cpu", measure=timed_step(0.01, 0.002, []), key=key)
    new_process(monkeypatch)
    chosen = inference_precision("auto", model, 1)
    assert chosen.name == "bf16" and "measured earlier" in chosen.reason


def test_two_identical_predict_calls_pick_the_same_precision(tmp_path, capsys):
    from PIL import Image

    save_pretrained(tiny_model(), tmp_path / "weights")
    image = tmp_path / "a.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(image)
    argv = [
        "predict",
        str(image),
        "--weights",
        str(tmp_path / "weights"),
        "--device",
        "cpu",
    ]  # a GPU decides by rule
    lines = []
    for _ in range(2):
        precision._measured.clear()
        assert cli.main(argv) == 0
        lines += [line for line in capsys.readouterr().err.splitlines() if "precision" in line]
    assert len(lines) == 2 and lines[0] == lines[1] and "auto: CPU with amx_bf16" in lines[0]


def test_the_key_leaves_out_the_heads_class_count():
    """A folder of 5 classes reuses the measurement of one of 6: the head is a negligible part of the work."""
    signature = precision.model_signature
    assert signature(tiny_model()) == signature(tiny_model(num_classes=6))
    assert signature(tiny_model()) != signature(tiny_model(img_size=32))


def test_a_measurement_is_announced_before_it_starts_and_its_cost_after_the_first_call(timed_step):
    said, seen_at_call = [], []

    def step(dtype):
        seen_at_call.append(len(said))
        timed_step(0.5, 0.25, [])(dtype)

    choose_precision("auto", "cpu", measure=step, key="k", what="a step", say=said.append)
    assert seen_at_call[0] == 1 and "timing 10 calls of a step in bf16 and fp32" in said[0]
    assert seen_at_call[1] == 2 and "the first call took 0.5 s; at most ~5 s in all" in said[1]


def test_an_evaluation_of_fewer_images_than_a_measurement_decides_by_rule(monkeypatch):
    """`vitkit eval` of a small model on 36 images: a measurement would run 320."""
    model = tiny_model()
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: pytest.fail("measured"))
    chosen = inference_precision("auto", model, 500, images=36)
    assert chosen.name == "fp32" and "36 images are fewer than a measurement would run (320)" in chosen.reason


def test_a_training_trial_and_a_large_model_decide_by_rule(monkeypatch):
    model = tiny_model()
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: pytest.fail("measured"))
    trial = precision.training_precision("auto", torch.device("cpu"), model, 3, never_measured, "k", "a step")
    assert trial.name == "fp32" and "a run of 3 steps is too short for a measurement" in trial.reason
    monkeypatch.setattr(precision, "LARGE_MODEL_PARAMS", 1000)
    large = precision.training_precision(
        "auto", torch.device("cpu"), model, 10_000, never_measured, "k", "a step"
    )
    assert large.name == "bf16" and "gains from bf16" in large.reason


def test_a_full_training_run_measures(timed_step):
    calls = []
    chosen = precision.training_precision(
        "auto",
        torch.device("cpu"),
        tiny_model(),
        precision.TRIAL_STEPS,
        timed_step(0.02, 0.01, calls),
        "k",
        "a step",
    )
    assert (
        chosen.name == "bf16" and "measured faster" in chosen.reason and len(calls) == precision.MEASURE_CALLS
    )

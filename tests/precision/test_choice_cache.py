"""`auto` decides once per machine and call: a measurement is kept in the cache directory for every later process;
where nothing was measured, the nearest row of the shipped table decides without measuring (well under half a
second), and `auto` measures only where the row is unsure and the measurement is a small share of the work."""

import json
import time

import pytest
import torch

from tiny import build_tiny_vit
from vitkit import cli, precision, save_pretrained
from vitkit.models import create_model
from vitkit.precision import choose_precision, inference_precision
from vitkit.precision_table import TableRow, WorkShape

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


def table(monkeypatch, *rows: tuple[str, int, int, int, float]) -> None:
    """The table auto reads: AMX rows of (mode, width, tokens, batch, bf16 speed-up)."""
    made = [TableRow("amx", WorkShape(*row[:4]), row[4], f"model {i}", "test") for i, row in enumerate(rows)]
    monkeypatch.setattr(precision, "load_table", lambda: made)


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


def test_the_shipped_table_decides_without_measuring(monkeypatch):
    model = tiny_model()
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: pytest.fail("measured"))
    start = time.perf_counter()
    chosen = inference_precision("auto", model, 1)
    assert time.perf_counter() - start < 0.5
    assert "table row amx/inference" in chosen.reason and "not measured" in chosen.reason
    assert inference_precision("fp32", model, 1).name == "fp32"


def test_the_nearest_row_of_the_cpus_kind_and_the_works_mode_decides(monkeypatch):
    """The gain follows width, tokens and batch: a narrow model at batch 1 loses, a wide one at 32 gains."""
    table(
        monkeypatch,
        ("inference", 192, 197, 1, 0.6),
        ("inference", 1024, 197, 32, 2.0),
        ("training", 192, 197, 1, 1.5),
    )
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: pytest.fail("measured"))
    small = inference_precision("auto", create_model("ViT-Ti/16", depth=1), 1)
    assert small.name == "fp32" and "model 0 at batch 1" in small.reason and "0.60x" in small.reason
    large = inference_precision("auto", create_model("ViT-L/16", depth=1), 16)
    assert large.name == "bf16" and "model 1 at batch 32" in large.reason
    trained = precision.training_precision(
        "auto", torch.device("cpu"), create_model("ViT-Ti/16", depth=1), 10, 1, never_measured, "k", "a step"
    )
    assert trained.name == "bf16" and "table row amx/training model 2" in trained.reason


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


def test_an_unsure_row_is_measured_only_where_the_measurement_is_a_small_share_of_the_work(
    monkeypatch, timed_step
):
    model = tiny_model()
    table(monkeypatch, ("inference", 192, 50, 32, 1.05), ("training", 192, 50, 32, 1.05))
    few = inference_precision("auto", model, 32, images=36)  # a measurement would run 320 images
    assert few.name == "bf16" and "not measured" in few.reason
    enough = precision.MEASURE_CALLS * 32 / precision.MEASURE_SHARE
    calls = []
    monkeypatch.setattr(precision, "measured_seconds", lambda *a, **k: calls.append(1) or (0.02, 0.01))
    assert inference_precision("auto", model, 32, images=int(enough) + 32).name == "bf16" and calls
    assert "not measured" in inference_precision("auto", model, 32).reason  # a server: the work is unknown
    steps = int(precision.MEASURE_CALLS / precision.MEASURE_SHARE)
    short = precision.training_precision(
        "auto", torch.device("cpu"), model, steps - 1, 32, never_measured, "k", "a step"
    )
    assert "not measured" in short.reason
    table(monkeypatch, ("training", 192, 50, 32, 2.0))  # a sure row: never measured
    sure = precision.training_precision(
        "auto", torch.device("cpu"), model, 10**6, 32, never_measured, "k", "a step"
    )
    assert sure.name == "bf16" and "not measured" in sure.reason


def test_a_long_training_run_with_an_unsure_row_measures(monkeypatch, timed_step):
    table(monkeypatch, ("training", 192, 50, 32, 1.0))
    calls = []
    chosen = precision.training_precision(
        "auto",
        torch.device("cpu"),
        tiny_model(),
        int(precision.MEASURE_CALLS / precision.MEASURE_SHARE) + 1,
        32,
        timed_step(0.02, 0.01, calls),
        "k",
        "a step",
    )
    assert (
        chosen.name == "bf16" and "measured faster" in chosen.reason and len(calls) == precision.MEASURE_CALLS
    )

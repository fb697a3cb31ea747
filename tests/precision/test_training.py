"""Training under the precision policy: report.json says what ran and why, bf16 keeps float32 weights,
optimizer state and loss, and a resumed run keeps its precision and ends bitwise identical."""

import json
import shutil

import pytest
import torch

from vitkit import cli, precision
from vitkit.storage import load_state_dict
from vitkit.training.objectives import classification_loss

from .test_policy import AMX_LIKE


def train(out, tiny_recipe, *extra) -> dict:
    assert (
        cli.main(
            ["train", "--out", str(out), "--steps", "10", "--checkpoint-every", "5", *tiny_recipe, *extra]
        )
        == 0
    )
    return json.loads((out / "report.json").read_text())


def fake_measurement(monkeypatch, fp32_s: float, bf16_s: float, dtypes: list) -> None:
    """Run the caller's real step once per precision (it must work), then report the given times."""

    def measured(measure, key=None, **announce):
        for dtype in (None, torch.bfloat16):
            measure(dtype)
            dtypes.append(dtype)
        return fp32_s, bf16_s

    monkeypatch.setattr(precision, "measured_seconds", measured)


def test_the_loss_is_float32_under_bf16_autocast(tiny_vit):
    model = tiny_vit().train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randn(2, 3, 16, 16))
        loss = classification_loss(logits, torch.tensor([0, 2]), "softmax", 0.1)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32


@pytest.mark.slow
def test_auto_bf16_trains_float32_state_and_resumes_bitwise_with_its_choice(
    tmp_path, tiny_recipe, monkeypatch
):
    monkeypatch.setattr(precision, "cpu_flags", lambda: AMX_LIKE)
    monkeypatch.setattr(
        precision, "unmeasured_rule", lambda *a: None
    )  # 10 steps measure, as an unsure row's run
    measured = []
    fake_measurement(monkeypatch, fp32_s=2.0, bf16_s=1.0, dtypes=measured)
    stateful = ["train.ema_decay=0.99", "model.dropout=0.1", "train.precision=auto"]  # tiny pins fp32
    reference = train(tmp_path / "reference", tiny_recipe, *stateful)
    assert measured == [None, torch.bfloat16]  # the engine's forward and backward ran in both precisions
    assert reference["precision"] == "bf16" and "bf16 measured faster" in reference["precision_reason"]
    step = tmp_path / "reference" / "checkpoints" / "step_00000005"
    assert json.loads((step / "state.json").read_text())["precision"] == "bf16"
    weights = {**load_state_dict(step / "model.safetensors"), **load_state_dict(step / "ema.safetensors")}
    assert {w.dtype for w in weights.values() if w.is_floating_point()} == {
        torch.float32
    }  # fp32 weights, EMA
    optimizer = torch.load(step / "optimizer.pt", weights_only=True)
    moments = [v for s in optimizer["state"].values() for v in s.values() if torch.is_tensor(v) and v.ndim]
    assert moments and {m.dtype for m in moments} == {torch.float32}

    # The same run killed after step 5, resumed where the measurement would now say fp32: it stays bf16.
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "reference", killed)
    shutil.rmtree(killed / "checkpoints" / "step_00000010")
    shutil.rmtree(killed / "final")
    (killed / "report.json").unlink()
    fake_measurement(monkeypatch, fp32_s=1.0, bf16_s=2.0, dtypes=measured)
    assert cli.main(["train", "--out", str(killed), "--resume"]) == 0
    resumed = json.loads((killed / "report.json").read_text())
    assert resumed["precision"] == "bf16" and "kept from the run's start" in resumed["precision_reason"]
    a = load_state_dict(killed / "final" / "model.safetensors")
    b = load_state_dict(tmp_path / "reference" / "final" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in b)
    assert resumed["test_top1"] == reference["test_top1"]

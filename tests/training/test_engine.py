"""The training engine end to end through the CLI: it learns, leaves a complete run directory, stops on bad input."""

import contextlib
import io
import json
import time

import pytest
import torch
from PIL import Image
from torchvision.datasets import FashionMNIST

from vitkit import cli, from_pretrained
from vitkit.data.lazy import LazySource
from vitkit.storage import load_state_dict, read_config
from vitkit.training import objectives
from vitkit.training.step import NonFiniteLoss, PendingLosses


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_recipe):
    """One 60-step run shared by the tests that read it: (run directory, what the CLI printed)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as printed:
        patch.setenv("VITKIT_EMBEDDED", "1")
        args = ["--steps", "60", "--checkpoint-every", "20", *tiny_recipe, "train.eval_every=30"]
        code = cli.main(["train", "--out", str(out), *args])
    torch.set_num_threads(threads)
    assert code == 0
    return out, printed.getvalue()


def test_a_short_run_learns_and_leaves_a_complete_run_directory(trained):
    out, printed = trained
    assert "test top-1" in printed and f"run directory: {out}" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["train_loss_last"] < report["train_loss_first"] - 0.3
    assert report["test_top1"] > 0.25 and report["steps"] == 60 and report["world_size"] == 1
    for key in ("images_per_second", "wall_seconds", "test_top5", "train_data"):
        assert key in report
    assert (report["device"], report["precision"], report["precision_reason"]) == ("cpu", "fp32", "asked for")
    assert set(report["step_seconds"]) == {"data", "forward_backward", "optimizer"}
    assert f"precision {report['precision']} ({report['precision_reason']})" in printed
    for name in ("config.toml", "metrics.jsonl", "curves.png", "confusion.png", "final/model.safetensors"):
        assert (out / name).is_file(), name
    assert any((out / "tensorboard").iterdir())
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000040", "step_00000060"]
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "test_top1" in r]
    assert [r["step"] for r in evals] == [30, 60]
    model = from_pretrained(out / "final")
    assert model.config.in_chans == 1 and model.config.num_classes == 10
    assert model.class_names == list(FashionMNIST.classes)  # the data's names, for predict and eval


def test_eval_prints_the_runs_accuracy_and_writes_a_confusion_matrix(trained, tmp_path, capsys):
    out, _ = trained
    report = json.loads((out / "report.json").read_text())
    # in the run's own precision: `auto` may choose the other one for evaluation on a CPU with native bf16
    argv = [
        "eval",
        "--weights",
        str(out),
        "--confusion",
        str(tmp_path / "cm.png"),
        "--precision",
        report["precision"],
    ]
    assert cli.main(argv) == 0
    assert f"top-1 {100 * report['test_top1']:.2f}%" in capsys.readouterr().out
    assert (tmp_path / "cm.png").stat().st_size > 1000


@pytest.mark.slow  # compiles the model, for each of the two batch sizes (~30 s)
def test_eval_compiled_for_inference_gives_the_eager_loss(trained, tmp_path, capsys):
    """`--compile`: the model compiled with frozen weights (inductor's freezing on while it compiles, off again
    after); the loss of eager evaluation, the test set's last batch smaller than the others."""
    import torch._inductor.config as inductor_config

    out, _ = trained
    freezing = []
    compile = torch.compile
    argv = ["eval", "--weights", str(out), "--confusion", str(tmp_path / "cm.png"), "--precision", "fp32"]
    argv += ["--batch-size", "96"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "compile", lambda m: freezing.append(inductor_config.freezing) or compile(m))
        assert cli.main([*argv, "--compile"]) == 0
    compiled = capsys.readouterr().out
    assert freezing == [True] and not inductor_config.freezing
    assert cli.main([*argv, "--overwrite"]) == 0  # the compiled run's confusion matrix is replaced
    eager = capsys.readouterr().out
    loss = [float(text.rpartition("loss ")[2].split()[0]) for text in (compiled, eager)]
    assert loss[0] == pytest.approx(loss[1], rel=1e-4)  # float32 compiled: the same logits to rounding


@pytest.mark.slow
def test_finetune_at_a_higher_resolution_starts_from_the_weights_with_a_zero_head(
    trained, tmp_path, tiny_recipe
):
    out, _ = trained
    tuned = tmp_path / "tuned"
    args = [
        "finetune",
        "--weights",
        str(out),
        "--out",
        str(tuned),
        "--steps",
        "4",
        *tiny_recipe,
        "model.img_size=56",
    ]
    assert cli.main([*args, "train.micro_batch_size=16", "train.ema_decay=0.9999"]) == 0
    config = read_config(tuned / "final")
    assert config["img_size"] == [56, 56] and config["hidden_size"] == 32
    saved = (tuned / "config.toml").read_text()
    assert 'name = "sgd"' in saved and f'weights = "{out}"' in saved


def test_a_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(
    tmp_path, capsys, monkeypatch, tiny_recipe
):
    real_loss, calls = objectives.classification_loss, []

    def loss_that_explodes(*args, **kwargs):
        calls.append(1)
        value = real_loss(*args, **kwargs)
        return value * float("nan") if len(calls) == 13 else value

    monkeypatch.setattr(objectives, "classification_loss", loss_that_explodes)
    out = tmp_path / "run"
    code = cli.main(["train", "--out", str(out), "--steps", "30", "--checkpoint-every", "5", *tiny_recipe])
    error = capsys.readouterr().err
    assert code == 1
    assert "loss is nan at step 13" in error and "last good checkpoint: step 10" in error
    assert (out / "checkpoints" / "step_00000010" / "state.json").is_file()
    assert not (out / "final").exists()
    weights = load_state_dict(out / "checkpoints" / "step_00000010" / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_deferred_losses_are_checked_when_read_on_cuda_and_by_the_step_on_cpu():
    """On CUDA the step does not read its loss (no host sync), so reading the pending losses checks them."""
    for device, raises in (("cuda", True), ("cpu", False)):
        pending = PendingLosses(torch.device(device))
        for step, loss in enumerate((2.0, float("inf"), 1.5), start=1):
            pending.append(step, torch.tensor(loss), 0.1)
        if raises:
            with pytest.raises(NonFiniteLoss, match="loss is inf at step 2; stopped at step 3"):
                pending.read()
        else:
            assert [loss for _, loss, _ in pending.read()] == [2.0, float("inf"), 1.5]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["optim.lrr=1"],
            "unknown config key 'optim.lrr'; did you mean 'optim.lr'? (valid keys: optim.name,",
        ),
        (["model.hidden=3"], "did you mean 'model.hidden_size'? (valid keys: model.name, model.weights,"),
        (["data.dataset=/no/such/folder"], "/no/such/folder: no such ImageFolder directory"),
        (["--config", "/no/such.toml"], "/no/such.toml: no such config file"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, args, message, tiny_recipe):
    code = cli.main(["train", "--out", str(tmp_path / "run"), "--steps", "5", *tiny_recipe, *args])
    error = capsys.readouterr().err
    assert code == 2
    assert message in error and len(error.strip().splitlines()) == 1


def test_a_missing_dataset_says_where_it_looked_and_how_to_get_it(tmp_path, capsys, tiny_recipe):
    args = ["--data-dir", str(tmp_path / "none"), "data.dataset=cifar10", *tiny_recipe]
    code = cli.main(["train", "--out", str(tmp_path / "run"), *args])
    error = capsys.readouterr().err
    assert code == 2 and str(tmp_path / "none") in error and "cifar" in error.lower()


def write_gray_folder(root, per_class):
    """A two-class train/test ImageFolder of small grey PNGs."""
    for split in ("train", "test"):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.new("L", (28, 28), color=40 * i).save(folder / f"{i}.png")


def test_a_corrupt_image_is_reported_with_its_path(tmp_path, capsys, tiny_recipe):
    write_gray_folder(tmp_path / "images", per_class=2)
    bad = tmp_path / "images" / "train" / "a" / "broken.png"
    bad.write_bytes(b"not a png")
    (tmp_path / "images" / "test" / "b" / "broken.png").write_bytes(b"not a png either")  # evaluated once
    args = [
        f"data.source=folder:{tmp_path / 'images'}",
        *tiny_recipe,
        "train.batch_size=5",
    ]  # the broken file is read
    code = cli.main(["train", "--out", str(tmp_path / "run"), *args])
    error = capsys.readouterr().err
    assert code == 2 and str(bad) in error and len(error.strip().splitlines()) == 1
    assert (
        cli.main(["train", "--out", str(tmp_path / "skip"), "--steps", "4", *args, "data.on_corrupt=skip"])
        == 0
    )
    report = json.loads((tmp_path / "skip" / "report.json").read_text())
    # read at each of the 4 steps, recorded once with its count
    broken_test = tmp_path / "images" / "test" / "b" / "broken.png"
    skipped = [(e["image"].split(": ")[0], e["times"]) for e in report["skipped_images"]]
    assert skipped == [(str(bad), 4), (str(broken_test), 1)]
    assert report["test_images"] == 4  # of 5 test files, the broken one is not evaluated
    output = capsys.readouterr()
    assert (output.out + output.err).count(f"skipped unreadable image {bad}") == 1


@pytest.mark.slow
def test_an_existing_run_is_not_overwritten_and_resume_must_match(tmp_path, capsys, tiny_recipe):
    out = tmp_path / "run"
    assert cli.main(["train", "--out", str(out), "--steps", "4", *tiny_recipe]) == 0
    assert cli.main(["train", "--out", str(out), "--steps", "4", *tiny_recipe]) == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err
    assert (
        cli.main(["train", "--out", str(out), "--steps", "4", "--resume", *tiny_recipe, "optim.lr=0.1"]) == 2
    )
    error = capsys.readouterr().err
    assert "differs from the saved" in error and "optim.lr" in error
    assert cli.main(["train", "--out", str(out), "--resume"]) == 0


def test_the_time_spent_waiting_for_batches_is_reported(tmp_path, capsys, monkeypatch, tiny_recipe):
    write_gray_folder(tmp_path / "images", per_class=4)
    read = LazySource.read

    def slow_read(
        self, index, channels=3
    ):  # a slow disk: 30 ms per image, ~50x the tiny model's step per image
        time.sleep(0.03)
        return read(self, index, channels)

    monkeypatch.setattr(LazySource, "read", slow_read)
    args = [
        f"data.source=folder:{tmp_path / 'images'}",
        *tiny_recipe,
        "train.batch_size=4",
        "train.log_every=1",
    ]
    assert cli.main(["train", "--out", str(tmp_path / "run"), "--steps", "4", *args]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert 0.6 < report["data_wait_share"] <= 1.0 and report["step_seconds"]["data"] >= 4 * 0.03
    assert "data wait" in capsys.readouterr().out


def test_a_micro_batch_cap_above_the_batch_trains_as_one_pass(tmp_path, tiny_recipe):
    runs = {}
    for cap in (0, 128):  # 128 > the batch of 32: finetune's default cap with a small batch
        runs[cap] = tmp_path / f"cap{cap}"
        args = [
            "train",
            "--out",
            str(runs[cap]),
            "--steps",
            "4",
            *tiny_recipe,
            f"train.micro_batch_size={cap}",
        ]
        assert cli.main(args) == 0
    weights = [load_state_dict(run / "final" / "model.safetensors") for run in runs.values()]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_a_batch_that_does_not_split_into_micro_batches_is_refused_before_anything_is_written(
    tmp_path, tiny_recipe, capsys
):
    out = tmp_path / "run"
    argv = [
        "train",
        "--out",
        str(out),
        "--steps",
        "5",
        *tiny_recipe,
        "train.micro_batch_size=12",
    ]  # 32 = 2 x 12 + 8
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert "train.batch_size 32 must split evenly over 1 rank(s) and then into micro-batches" in error
    assert len(error.splitlines()) == 1 and not out.exists()

"""The Python API: vitkit.train / vitkit.finetune / vitkit.evaluate do what the commands do, from a notebook: the
same request, resolved to the same recipe, whichever front end it comes through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vitkit
from command_lines import api_sections
from photo_run import VAL_SPLIT
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.recipe.resolve import load_config
from vitkit.recipe.run_config import RECIPE_NAME
from vitkit.storage import load_state_dict


def test_train_in_python_is_the_command_line_run(photo_run, tmp_path):
    """The CLI run of the photo_run fixture, repeated through vitkit.train: the same recipe and weights."""
    recipe = load_config(photo_run / RECIPE_NAME)
    given = api_sections(
        [*TINY_RECIPE, "optim.warmup_steps=1", "train.batch_size=8", f"data.val_split={VAL_SPLIT}"]
    )
    given["data"]["source"] = recipe.data.source
    given["train"]["steps"] = 3
    report = vitkit.train(out=tmp_path / "run", quiet=True, **given)
    assert load_config(tmp_path / "run" / RECIPE_NAME).to_dict() == recipe.to_dict()
    ours, theirs = (
        load_state_dict(Path(run) / "final" / "model.safetensors") for run in (tmp_path / "run", photo_run)
    )
    assert all(ours[key].equal(theirs[key]) for key in theirs)
    assert report["val_top1"] == json.loads((photo_run / "report.json").read_text())["val_top1"]
    start = json.loads((tmp_path / "run" / "run.json").read_text())["starts"][0]
    assert start["command"][0].startswith("vitkit.train(out=") and start["torch"] and start["vitkit"]


OVERRIDES = ["optim.lr=1e-3", "model.depth=2", "data.train_subset=1000", "data.workers=1"]


@pytest.mark.parametrize(
    ("argv", "call"),
    [
        (["train", "--config", "fashion_mnist_vit", "--steps", "30", *OVERRIDES], lambda: vitkit.train(
            "fashion_mnist_vit", print_config=True, train={"steps": 30}, **api_sections(OVERRIDES))),
        (["train", "--epochs", "0.5", "train.processes=2", *OVERRIDES], lambda: vitkit.train(
            epochs=0.5, print_config=True, train={"processes": 2}, **api_sections(OVERRIDES))),
        (["finetune", "--weights", "w", "--config", "photos_finetune", "--steps", "5"], lambda: vitkit.finetune(
            "w", "photos_finetune", print_config=True, train={"steps": 5})),
    ],
    ids=["recipe-steps", "default-epochs-processes", "finetune"],
)  # fmt: skip
def test_the_same_request_resolves_to_the_same_recipe_both_ways(argv, call, capsys):
    """--print-config and print_config=True print the same annotated recipe (the call returns it too): run
    length, epochs counted on the data, the warmup fitted, processes and threads settled, the model named."""
    assert cli.main([*argv, "--print-config"]) == 0
    printed = capsys.readouterr().out
    returned = call()
    assert capsys.readouterr().out == printed == returned["config"]
    assert printed.startswith("[model]") and "instead of the recipe's" not in printed  # the recipe only


def test_a_resume_follows_the_same_rules_both_ways(tmp_path, capsys):
    """A resume continues the saved recipe from either front end: a change in how data is read is taken, a change
    in what is computed is the same one-line refusal."""
    run = tmp_path / "run"
    assert cli.main(["train", "--steps", "30", "--out", str(run), "--print-config"]) == 0
    run.mkdir()
    (run / RECIPE_NAME).write_text(capsys.readouterr().out)
    resume = ["train", "--out", str(run), "--resume", "data.workers=2"]
    assert cli.main([*resume, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "workers = 2" in printed and "steps = 30" in printed
    assert vitkit.train(out=run, resume=True, data={"workers": 2}, print_config=True)["config"] == printed
    capsys.readouterr()
    assert cli.main([*resume, "optim.lr=0.5"]) == 2
    refusal = capsys.readouterr().err.strip().removeprefix("vitkit train: error: ")
    with pytest.raises(ValueError) as raised:
        vitkit.train(out=run, resume=True, data={"workers": 2}, optim={"lr": 0.5})
    assert str(raised.value) == refusal and "optim.lr is 0.002 in the run, 0.5 given now" in refusal


def test_a_mistyped_section_or_field_names_the_nearest():
    with pytest.raises(ValueError, match="did you mean 'optim'"):
        vitkit.train(optm={"lr": 1e-3})
    with pytest.raises(ValueError, match="did you mean 'optim.lr'"):
        vitkit.train(optim={"lrr": 1e-3})


def test_evaluate_in_python_reports_a_run_on_its_own_data(photo_run):
    report = vitkit.evaluate(photo_run, precision="fp32")
    assert report["split"] == "val" and report["images"] == VAL_SPLIT and len(report["per_class"]) == 10
    assert report["report"] == str(photo_run / "eval_val.json")


@pytest.mark.slow
def test_finetune_in_python_then_evaluate(photo_run, tmp_path):
    source = load_config(photo_run / RECIPE_NAME).data.source
    report = vitkit.finetune(
        photo_run, out=tmp_path / "ft", quiet=True, data={"source": source}, train={"steps": 2, "batch_size": 8,
        "precision": "fp32", "device": "cpu", "micro_batch_size": 0}, optim={"warmup_steps": 0},
    )  # fmt: skip
    assert report["steps"] == 2 and "test_top1" in report
    evaluated = vitkit.evaluate(tmp_path / "ft", precision="fp32")
    assert evaluated["split"] == "test" and evaluated["top1"] == pytest.approx(report["test_top1"])
    assert (tmp_path / "ft" / "eval_test.json").is_file()


@pytest.mark.slow  # a training run, a fit and an evaluation: about 10 s
def test_python_calls_print_what_the_commands_print(tmp_path, capsys):
    """vitkit.train and vitkit.evaluate print the lines `vitkit train` and `vitkit eval` print (the phase after
    the last step, the closing line counting the training steps' seconds, the run directory; the results), and
    nothing with quiet=True."""
    settings = [*TINY_RECIPE, "train.steps=3", "optim.warmup_steps=1", "data.source=synthetic", "model.img_size=32",
                "model.in_chans=3", "model.patch_size=8"]  # fmt: skip
    assert cli.main(["train", "--out", str(tmp_path / "cli"), *settings]) == 0
    printed = {"cli": capsys.readouterr().out}
    report = vitkit.train(out=tmp_path / "python", **api_sections(settings))
    printed["python"] = capsys.readouterr().out
    for run, lines in printed.items():
        written = json.loads((tmp_path / run / "report.json").read_text())
        closing, where = lines.splitlines()[-2:]
        assert (
            closing.startswith("test top-1 ")
            and f"; 3 steps in {written['train_seconds']:.0f} s (" in closing
        )
        assert where.startswith(f"run directory: {tmp_path / run}  (weights: ")
        assert f"evaluating {written['test_images']} test images\n" in lines
    assert report["test_top1"] == written["test_top1"]
    assert cli.main(["eval", "--weights", str(tmp_path / "cli"), "--precision", "fp32"]) == 0
    command = capsys.readouterr().out
    result = vitkit.evaluate(tmp_path / "cli", precision="fp32")
    assert capsys.readouterr().out == command and f"top-1 {100 * result['top1']:.2f}%" in command
    vitkit.evaluate(tmp_path / "cli", precision="fp32", quiet=True)
    assert capsys.readouterr() == ("", "")

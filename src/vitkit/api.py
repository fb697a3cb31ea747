"""The Python API of the commands: `vitkit.train(...)`, `vitkit.finetune(...)` and `vitkit.evaluate(...)` do what
`vitkit train`, `vitkit finetune` and `vitkit eval` do, print what they print (nothing with `quiet=True`) and return
their report as a dict, so a notebook trains, fine-tunes and evaluates without a shell. A run stopped by Ctrl-C
raises KeyboardInterrupt after its checkpoint, with the call that continues it printed
(`vitkit.train(out=..., resume=True)`).

Settings are given per section, as keyword arguments named after the recipe's sections, each a dict of fields:
the shape of a TOML recipe and of RunConfig itself, so a recipe moves between a file, a command line and a call
unchanged, and a mistyped section or field is an error that names the nearest valid one:

    report = vitkit.train(data={"source": "folder:photos"}, model={"name": "ViT-S/16"}, train={"steps": 300})
    report = vitkit.finetune("ViT-B_16.npz", "configs/photos_finetune.toml", data={"source": "folder:photos"})
    report = vitkit.finetune("ViT-B_16.npz", "configs/photos_linear.toml", data={"source": "folder:photos"})

`model="ViT-S/16"` is short for `model={"name": "ViT-S/16"}`. A call and a command line are the same request
(vitkit.recipe.resolve.RecipeRequest) resolved by the same resolver and run by `run_resolved`: `resume`,
`epochs`, `train.processes` (N processes started on this machine) and `print_config=True` (the annotated recipe,
printed and returned, nothing trained) mean what `--resume`, `--epochs`, `train.processes` and `--print-config` do.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from vitkit.device import resolve_device
from vitkit.evaluation.run_directory import evaluate_weights as evaluate
from vitkit.recipe.annotated import annotated_toml
from vitkit.recipe.resolve import RecipeRequest, did_you_mean, resolve_recipe
from vitkit.recipe.run_config import RECIPE_NAME, SECTIONS, RunConfig
from vitkit.training.distributed import check_gpus_per_process, launch_processes, launched_world_size
from vitkit.training.report import format_metrics
from vitkit.training.trainer import run_training

__all__ = ["evaluate", "finetune", "train"]

Recipe = str | os.PathLike | RunConfig | None


class ProcessesFailed(Exception):
    """A process of `train.processes` failed with `exit_code`; its own error is on stderr already."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"a training process exited with status {exit_code} (its error is printed above)")
        self.exit_code = exit_code


def train(
    recipe: Recipe = None,
    out: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    epochs: float | None = None,
    quiet: bool = False,
    print_config: bool = False,
    **sections: dict[str, Any] | str,
) -> dict[str, Any]:
    """Train `recipe` (a TOML path or shipped name, a RunConfig, or None for the default recipe) with `sections`
    over it into `out` (default runs/<recipe>-<time>); returns report.json. `epochs` sets the length in passes over
    the training images instead of train.steps. `resume=True` continues the run in `out` with its saved recipe."""
    request = RecipeRequest(
        "train", recipe, section_settings(sections), None, epochs, resume, out, print_config, quiet
    )
    return _run(request, sections)


def finetune(
    weights: str | os.PathLike,
    recipe: Recipe = None,
    out: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    epochs: float | None = None,
    quiet: bool = False,
    print_config: bool = False,
    **sections: dict[str, Any] | str,
) -> dict[str, Any]:
    """Fine-tune `weights` (anything vitkit.load_weights reads) with the paper's recipe (§3.2, B.1.1) or `recipe`
    under `sections`, as `vitkit finetune --weights` does: a zero-initialised head, position embeddings resampled
    to a new `model.img_size`; with train.fit='linear' (configs/photos_linear.toml) a closed-form head on the
    frozen features instead (vitkit.training.linear_head), with train.fit='last_blocks'
    (configs/photos_last_blocks.toml) the last blocks and a head on cached tokens (vitkit.training.last_blocks).
    Returns report.json."""
    request = RecipeRequest(
        "finetune", recipe, section_settings(sections), str(weights), epochs, resume, out, print_config, quiet
    )
    return _run(request, sections)


def _run(request: RecipeRequest, sections: dict[str, Any]) -> dict[str, Any]:
    config = resolve_recipe(request)
    call = f"vitkit.{request.command}({', '.join(_arguments(request, sections))})"
    return run_resolved(request, config, command=[call])


def run_resolved(request: RecipeRequest, config: RunConfig, *, command: list[str]) -> dict[str, Any]:
    """Run `config`, resolved from `request`, as both front ends do: with `print_config` print the annotated
    recipe and return it as {"config": text}; with `train.processes` N > 1 (and no launcher around this
    process) start N processes on this machine, as `torchrun --standalone --nproc_per_node N` would, each running
    the request's command line; else train here. Returns report.json ({} in processes other than rank 0).
    `command` is what started the run, for run.json (the processes' too)."""
    if request.print_config:
        text = annotated_toml(config)
        print(text, end="")
        return {"config": text}
    run_dir = request.run_dir()
    if starts_processes(config):  # rank 0 of the processes prints the closing lines
        return _in_processes(request, config, run_dir, command)
    try:
        report = run_training(config, run_dir, resume=request.resume, command=command, quiet=request.quiet)
    except KeyboardInterrupt:
        if (run_dir / RECIPE_NAME).is_file():  # the run directory exists: what it holds continues
            print(
                f"to continue: {resume_command(run_dir, python=command[:1] != ['vitkit'])}", file=sys.stderr
            )
        raise
    if report and not request.quiet:  # ranks other than 0 return {}
        print(closing_lines(report, run_dir))
    return report


def closing_lines(report: dict[str, Any], run_dir: Path) -> str:
    """What a finished run says last: its evaluations, the work and the seconds it took, and where it is."""
    work = (
        f"{report['train_images']} training images"
        if report.get("fit") == "linear"
        else f"{report['steps']} steps"
    )
    seconds = report.get("train_seconds", report["wall_seconds"])
    rate = f" ({report['images_per_second']:.3g} img/s)" if "images_per_second" in report else ""
    total = (
        f"; {report['wall_seconds']:.0f} s in all" if round(report["wall_seconds"]) > round(seconds) else ""
    )
    return (
        f"{format_metrics(report)}  on {report['test_data']} ({report['test_images']} images); {work} in "
        f"{seconds:.0f} s{rate}{total}\n"
        f"run directory: {run_dir}  (weights: {run_dir}/final, report: {run_dir}/report.json)"
    )


def resume_command(run_dir: Path, python: bool) -> str:
    """The call or command line that continues the run in `run_dir` from its saved recipe and latest checkpoint."""
    if python:
        return f"vitkit.train(out={str(run_dir)!r}, resume=True)"
    return shlex.join(["vitkit", "train", "--out", str(run_dir), "--resume"])


def starts_processes(config: RunConfig) -> bool:
    """Whether running `config` here starts its `train.processes` (none when a launcher started this one)."""
    return config.train.processes > 1 and launched_world_size() == 1


def _in_processes(
    request: RecipeRequest, config: RunConfig, run_dir: Path, command: list[str]
) -> dict[str, Any]:
    """report.json of the run that `train.processes` processes of `vitkit <the request>` train into `run_dir`; a
    RunConfig recipe goes to them as a TOML file, `command` (what started them) to run.json. A failed process is
    ProcessesFailed."""
    check_gpus_per_process(resolve_device(config.train.device), config.train.processes)
    with tempfile.TemporaryDirectory(prefix="vitkit-recipe-") as folder:
        if isinstance(request.recipe, RunConfig):
            path = Path(folder) / "recipe.toml"
            path.write_text(request.recipe.to_toml())
            request = dataclasses.replace(request, recipe=path)
        argv = request.command_line(run_dir)
        code = launch_processes(config.train.processes, config.train.threads, argv, started_by=command)
    if code:
        raise ProcessesFailed(code)
    return json.loads((run_dir / "report.json").read_text())


def section_settings(sections: dict[str, dict[str, Any] | str]) -> list[tuple[str, Any]]:
    """(section.field, value) pairs of keyword sections; `model="X"` is `model={"name": "X"}`."""
    settings = []
    for section, values in sections.items():
        if section not in SECTIONS:
            hint = did_you_mean(section, SECTIONS)
            raise ValueError(f"unknown recipe section {section!r}{hint} (sections: {', '.join(SECTIONS)})")
        if section == "model" and isinstance(values, str):
            values = {"name": values}
        if not isinstance(values, dict):
            raise ValueError(f"{section}= must be a dict of fields, e.g. {section}={{...}}; got {values!r}")
        settings += [(f"{section}.{key}", value) for key, value in values.items()]
    return settings


def _arguments(request: RecipeRequest, sections: dict[str, Any]) -> list[str]:
    """The call's arguments as Python source, for run.json: what started the run, as a command line would."""
    recipe = request.recipe
    given = [repr(request.weights)] if request.weights is not None else []
    given += [repr(str(recipe))] if isinstance(recipe, (str, os.PathLike)) else []
    given += ["<RunConfig>"] if isinstance(recipe, RunConfig) else []
    named = {
        "out": request.out,
        "epochs": request.epochs,
        "resume": request.resume or None,
        "quiet": request.quiet or None,
        **sections,
    }
    given += [f"{key}={value!r}" for key, value in named.items() if value is not None]
    return given

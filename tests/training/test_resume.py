"""A resumed run ends bitwise identical to an uninterrupted one (losses, weights, EMA) with every random draw of a
step on: dropout, drop-path, MixUp and CutMix, EMA, gradient accumulation; from an image folder read in 0 or 2 DataLoader
workers or a source in memory; after SIGINT, SIGTERM or SIGKILL. Partial checkpoints are never read."""

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from hostile_files import grey_folder
from vitkit import cli
from vitkit.data import TrainBatches
from vitkit.data.source import ReadOptions
from vitkit.data.workers import loader
from vitkit.storage import load_state_dict
from vitkit.training import checkpoint as ckpt
from vitkit.training.rundir import remove_leftovers
from vitkit.training.step import TrainStep

# Dropout, drop-path, EMA and gradient accumulation on: every piece of state a resume must restore.
STATEFUL = ["model.dropout=0.1", "model.drop_path=0.1", "train.ema_decay=0.99", "train.micro_batch_size=16"]
# The resume matrix's recipe: those, MixUp and CutMix (keyed per micro-batch), and evaluations between steps,
# which start DataLoader iterators of their own.
RECIPE = ["model.dropout=0.1", "model.drop_path=0.1", "train.ema_decay=0.99", "train.batch_size=12",
          "train.micro_batch_size=4", "data.mixup=0.2", "data.cutmix=1.0", "train.eval_every=3",
          "train.log_every=1", "optim.warmup_steps=1"]  # fmt: skip
STEPS, CHECKPOINT_EVERY = 12, 4
# The signal comes as step 7 starts (0-based 6): after checkpoint 4 and the logged steps 5 and 6.
SIGNALLED_STEP = 6
IN_MEMORY = ["data.source=synthetic", "model.img_size=32", "model.in_chans=3", "model.patch_size=8"]
COMPARED = ("final/model.safetensors", f"checkpoints/step_{STEPS:08d}/model.safetensors",
            f"checkpoints/step_{STEPS:08d}/ema.safetensors")  # fmt: skip


@pytest.fixture(scope="module")
def sources(tmp_path_factory, tiny_recipe) -> dict[str, list[str]]:
    """The recipe on each kind of source: an image folder of 36 images (3 steps an epoch, so the resume starts
    mid-epoch), read per sample, and the synthetic set, held in memory."""
    images = grey_folder(tmp_path_factory.mktemp("resume") / "images", classes=("a", "b", "c"), per_class=12)
    return {
        "folder": [*tiny_recipe, *RECIPE, f"data.source=folder:{images}"],
        "memory": [*tiny_recipe, *RECIPE, *IN_MEMORY],
    }


@pytest.fixture(scope="module")
def references(tmp_path_factory, sources) -> Callable[[str], Path]:
    """A source's uninterrupted run (made once, when a test first asks), read in this process: the resumed runs
    read in 0 or 2 workers."""
    root, made = tmp_path_factory.mktemp("references"), {}

    def reference(source: str) -> Path:
        if source not in made:
            assert cli.main(train_command(root / source, sources[source])) == 0
            made[source] = root / source
        return made[source]

    return reference


def train_command(out: Path, recipe: list[str], *extra: str) -> list[str]:
    return ["train", "--out", str(out), "--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY),
            *recipe, *extra]  # fmt: skip


def losses(run: Path) -> list[str]:
    return [line for line in (run / "metrics.jsonl").read_text().splitlines() if "train_loss" in line]


def assert_bitwise_equal(a, b):
    """Same names, dtypes and bytes (safetensors files themselves differ: their metadata order is not fixed)."""
    a, b = load_state_dict(a), load_state_dict(b)
    assert a.keys() == b.keys()
    differing = [name for name in a if a[name].dtype != b[name].dtype or not torch.equal(a[name], b[name])]
    assert not differing, f"{len(differing)} of {len(a)} tensors differ: {differing[:3]}"


def assert_same_run(run: Path, reference: Path) -> None:
    for name in COMPARED:
        assert_bitwise_equal(run / name, reference / name)
    assert losses(run) == losses(reference) and len(losses(run)) == STEPS


def signal_at(step: int, sig: int, patch=setattr) -> None:
    """This process sends itself `sig` as step `step` starts: a Ctrl-C, a scheduler's SIGTERM or a SIGKILL at a
    known moment. `patch` is monkeypatch's setattr in a test, or setattr in a process of its own."""
    call = TrainStep.__call__

    def signalled(self, at, *args, **kwargs):
        if at == step:
            os.kill(os.getpid(), sig)
        return call(self, at, *args, **kwargs)

    patch(TrainStep, "__call__", signalled)


def sigkilled(run: Path, recipe: list[str]) -> None:
    """`vitkit train` in a process of its own that is SIGKILLed as step SIGNALLED_STEP starts."""
    code = (f"import signal, sys, test_resume; test_resume.signal_at({SIGNALLED_STEP}, signal.SIGKILL); "
            f"from vitkit import cli; sys.exit(cli.main(sys.argv[1:]))")  # fmt: skip
    tests = Path(__file__).parents[1]
    path = os.pathsep.join([str(Path(__file__).parent), str(tests), os.environ.get("PYTHONPATH", "")])
    with open(run.parent / "killed.log", "wb") as log:  # the orphaned workers may hold it a moment longer
        process = subprocess.run([sys.executable, "-c", code, *train_command(run, recipe)], stdout=log,
                                 stderr=log, env=os.environ | {"PYTHONPATH": path}, timeout=300)  # fmt: skip
    assert process.returncode == -signal.SIGKILL, (run.parent / "killed.log").read_text()


def stop_and_resume(monkeypatch, tmp_path, sources, references, source: str, workers: int, sig: int) -> None:
    """Stop a run with `sig` after its checkpoint at step 4 and two more steps; resume it: as the reference."""
    recipe, run = [*sources[source], f"data.workers={workers}"], tmp_path / "run"
    if sig == signal.SIGKILL:
        sigkilled(run, recipe)
    else:
        with monkeypatch.context() as patch:
            signal_at(SIGNALLED_STEP, sig, patch.setattr)
            assert cli.main(train_command(run, recipe)) == cli.INTERRUPTED
    # SIGINT and SIGTERM let the signalled step end and checkpoint it; SIGKILL leaves the last checkpoint by steps.
    stopped_at = CHECKPOINT_EVERY if sig == signal.SIGKILL else SIGNALLED_STEP + 1
    assert ckpt.checkpoint_step(ckpt.latest_checkpoint(run)) == stopped_at
    assert CHECKPOINT_EVERY <= len(losses(run)) <= SIGNALLED_STEP + 1 and not (run / "final").exists()
    assert cli.main(train_command(run, recipe, "--resume")) == 0
    assert_same_run(run, references(source))


def cases(*matrix: tuple[str, int, signal.Signals]) -> pytest.MarkDecorator:
    ids = [f"{source}-workers{workers}-{sig.name}" for source, workers, sig in matrix]
    return pytest.mark.parametrize(("source", "workers", "sig"), matrix, ids=ids)


@cases(("folder", 0, signal.SIGINT), ("folder", 2, signal.SIGTERM), ("folder", 2, signal.SIGKILL))
def test_resume_is_bitwise_identical(monkeypatch, tmp_path, sources, references, source, workers, sig):
    stop_and_resume(monkeypatch, tmp_path, sources, references, source, workers, sig)


@pytest.mark.slow
@cases(("folder", 0, signal.SIGTERM), ("folder", 0, signal.SIGKILL), ("folder", 2, signal.SIGINT),
       ("memory", 0, signal.SIGINT), ("memory", 0, signal.SIGTERM), ("memory", 0, signal.SIGKILL))  # fmt: skip
def test_resume_is_bitwise_identical_after_every_signal(
    monkeypatch, tmp_path, sources, references, source, workers, sig
):
    stop_and_resume(monkeypatch, tmp_path, sources, references, source, workers, sig)


def test_what_the_reading_draws_leaves_the_model_draws_alone(monkeypatch, tmp_path, sources, references):
    """A source that draws from torch's generator as it reads (as a DataLoader iterator does as it starts) leaves
    dropout and drop-path as they were: the step seeds the generator once its batch is read."""
    read = TrainBatches.__call__

    def read_and_draw(self, step):
        torch.rand(step + 1)
        return read(self, step)

    monkeypatch.setattr(TrainBatches, "__call__", read_and_draw)
    assert cli.main(train_command(tmp_path / "run", sources["folder"])) == 0
    assert_same_run(tmp_path / "run", references("folder"))


@pytest.mark.parametrize("workers", [0, 2])
def test_starting_a_loader_leaves_the_global_generator_alone(workers):
    state = torch.get_rng_state()
    stream = iter(loader(list(range(4)), ReadOptions(workers=workers), pin_memory=False))
    assert next(stream) == 0
    del stream
    assert torch.equal(torch.get_rng_state(), state)


def test_partial_checkpoints_are_ignored_and_cleaned(tmp_path):
    root = tmp_path / ckpt.CHECKPOINT_DIR
    (root / "step_00000010").mkdir(parents=True)
    (root / "step_00000010" / ckpt.STATE_NAME).write_text('{"step": 10}')
    (root / "step_00000020").mkdir()  # renamed by hand or damaged: no manifest, never picked up
    (root / ".tmp-step_00000030-abc").mkdir()  # a writer killed mid-checkpoint
    assert ckpt.latest_checkpoint(tmp_path) == root / "step_00000010"
    remove_leftovers(tmp_path)
    assert not (root / ".tmp-step_00000030-abc").exists()

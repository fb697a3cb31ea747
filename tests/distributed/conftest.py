"""Two CPU processes under torchrun (gloo) on a tiny ViT and the embedded Fashion-MNIST subset."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiny import TINY_RECIPE

# Dropout and drop-path off: then a step's gradients do not depend on how the global batch is split over ranks.
SPLIT_INVARIANT_RECIPE = [*TINY_RECIPE, "model.dropout=0", "model.drop_path=0"]
STEPS = 30
TORCHRUN = Path(sys.executable).with_name("torchrun")


def environment() -> dict[str, str]:
    # CPU only: on a machine with GPUs the ranks would otherwise each ask for cuda:LOCAL_RANK
    env = {**os.environ, "VITKIT_EMBEDDED": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    for name in (
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
    ):
        env.pop(name, None)
    return env


def torchrun(
    args: list[str], cwd: Path, *, nproc: int = 2, launcher: tuple[str, ...] = ()
) -> subprocess.Popen:
    """`torchrun --standalone --nproc_per_node N vitkit ...` on CPU, output captured."""
    if not TORCHRUN.is_file() or not torch.distributed.is_available():
        pytest.skip("torchrun / torch.distributed is not available")
    command = [
        str(TORCHRUN),
        "--standalone",
        f"--nproc_per_node={nproc}",
        *launcher,
        "-m",
        "vitkit.cli",
        *args,
    ]
    return subprocess.Popen(
        command, cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run_torchrun(args: list[str], cwd: Path, **kwargs) -> str:
    process = torchrun(args, cwd, **kwargs)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


def truncate(run: Path, copy: Path, step: int) -> Path:
    """A copy of a finished run as if killed right after checkpoint `step` (later checkpoints and outputs gone)."""
    shutil.copytree(run, copy)
    for path in (copy / "checkpoints").iterdir():
        if int(path.name.split("_")[1]) > step:
            shutil.rmtree(path)
    shutil.rmtree(copy / "final")
    (copy / "report.json").unlink()
    return copy


@pytest.fixture(scope="session")
def tiny_recipe() -> tuple[str, ...]:
    return tuple(SPLIT_INVARIANT_RECIPE)


@pytest.fixture(autouse=True)
def _embedded(embedded_data) -> None:
    """Every test here on the embedded subset (tests/tiny.py)."""

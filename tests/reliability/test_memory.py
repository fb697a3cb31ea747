"""Reading is bounded: a training run whose ImageFolder holds a 1 GB non-image (named .png) peaks within 200 MB
of the same run without it, measured as the peak resident memory of the process and its DataLoader workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostile_files import grey_folder, sparse_file
from tiny import TINY_RECIPE

MEASURE = (
    "import resource, subprocess, sys; "
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)  # the largest resident set among the run and the workers it waited for, in KiB


def peak_bytes(out: Path, folder: Path) -> int:
    recipe = [*TINY_RECIPE, "optim.warmup_steps=1", "train.batch_size=8", f"data.source=folder:{folder}",
              "data.workers=2", "data.on_corrupt=skip"]  # fmt: skip
    command = [sys.executable, "-c", MEASURE, sys.executable, "-m", "vitkit.cli", "train", "--out", str(out),
               "--steps", "6", *recipe]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=os.environ | {"VITKIT_EMBEDDED": "1"}
    )
    code, kib = map(int, result.stdout.split())
    assert code == 0, result
    return kib * 1024


@pytest.mark.slow
def test_a_1_gb_non_image_costs_no_memory(tmp_path: Path) -> None:
    plain = grey_folder(tmp_path / "plain")
    hostile = grey_folder(tmp_path / "hostile")
    sparse_file(hostile / "train" / "a" / "huge.png")
    without, with_it = peak_bytes(tmp_path / "run1", plain), peak_bytes(tmp_path / "run2", hostile)
    report = json.loads((tmp_path / "run2" / "report.json").read_text())
    assert [Path(e["image"].split(": ")[0]).name for e in report["skipped_images"]] == ["huge.png"]  # met
    print(
        f"peak resident memory: {without / 2**20:.0f} MiB without, {with_it / 2**20:.0f} MiB with the 1 GB file"
    )
    assert with_it - without < 200 * 2**20

"""What a run records about how it was started: vitkit and torch versions, Python, the device, the command.

`run.json` in the run directory lists every start of the run (the first, then each resume), so a result can be
traced to the software and machine that made it; report.json repeats the last start.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

import vitkit
from vitkit.device import cpu_model
from vitkit.storage import atomic_write_text

RUN_NAME = "run.json"
# What started the processes of `train.processes` (a command line or a Python call, as JSON), set by
# vitkit.training.distributed.launch_processes: each records that, not the command line it was given.
STARTED_BY = "VITKIT_STARTED_BY"


def device_name(device: torch.device) -> str:
    """The accelerator's or the CPU's model name, as the machine reports it."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def start_record(device: torch.device, command: list[str] | None) -> dict[str, Any]:
    """This start of a run: versions, device, and the command line (or Python call) that made it: `command`,
    or what started this process's launcher (STARTED_BY), or this process's own command line."""
    if STARTED_BY in os.environ:
        command = json.loads(os.environ[STARTED_BY])
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vitkit": vitkit.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "command": command if command is not None else [sys.executable, *sys.argv],
    }


def record_start(run_dir: Path, record: dict[str, Any]) -> None:
    """Append `record` to the run's run.json (written atomically)."""
    path = run_dir / RUN_NAME
    starts = json.loads(path.read_text())["starts"] if path.is_file() else []
    atomic_write_text(path, json.dumps({"starts": [*starts, record]}, indent=2) + "\n")

"""`export_program`: a vitkit model as a `torch.export` program (`.pt2`), loadable with `torch.export.load`
and no vitkit code; AOTInductor and ExecuTorch take it from there."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitkit.export.check import FP32_TOLERANCE, ExportCheck, compare
from vitkit.export.metadata import METADATA_KEY, dumps, loads, serving_metadata
from vitkit.export.staging import staged
from vitkit.export.trace import export_graph, exportable

METADATA_FILE = f"{METADATA_KEY}.json"  # extra file inside the .pt2 archive


def export_program(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    tolerance: float = FP32_TOLERANCE,
    log: Callable[[str], None] | None = print,
) -> ExportCheck:
    """Write `model` (eval mode, float32, free batch size) as a `.pt2` program with the serving metadata as
    the extra file `vitkit.json`, after the program read back from the file has reproduced the model's
    logits within `tolerance` at batch sizes 1 and 7 (else ExportMismatch and no file)."""
    model = exportable(model)
    program = export_graph(model)
    with staged(path) as target:
        torch.export.save(program, target, extra_files={METADATA_FILE: dumps(serving_metadata(model))})
        loaded, _ = load_program(target)
        check = compare(model, _numpy_runner(loaded), "torch.export program", tolerance=tolerance)
        if log is not None:
            log(check.summary())
    return check


def load_program(path: str | os.PathLike) -> tuple[nn.Module, dict[str, Any]]:
    """The module of a `.pt2` export (images -> logits) and its serving metadata."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such program file")
    extra = {METADATA_FILE: ""}
    try:
        program = torch.export.load(path, extra_files=extra)
    except (RuntimeError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise ValueError(f"{Path(path)}: not a readable torch.export program ({error})") from None
    if not extra[METADATA_FILE]:
        raise ValueError(f"{Path(path)}: no {METADATA_FILE} inside; not a vitkit program export")
    return program.module(), loads(extra[METADATA_FILE], str(path))


def _numpy_runner(module: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(x)).numpy()

    return run

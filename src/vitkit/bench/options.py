"""What the benchmarks' shared --precision means when they run: the autocast dtypes to time, and the row that says
what `--precision auto` picks (the options themselves: vitkit.commands.parsers.bench)."""

from __future__ import annotations

import torch

from vitkit.precision import Precision, inference_precision


def bench_dtypes(precision: str) -> dict[str, torch.dtype | None]:
    """The autocast dtypes a benchmark's --precision times: {'fp32': None, 'bf16': torch.bfloat16} or one."""
    dtypes = {"fp32": None, "bf16": torch.bfloat16}
    return dtypes if precision == "both" else {precision: dtypes[precision]}


def auto_row(model: torch.nn.Module, batch_size: int) -> dict[str, str]:
    """What `--precision auto` picks for inference of `model` at `batch_size` on its device, and why."""
    chosen = inference_precision("auto", model, batch_size)
    return {"implementation": auto_label(chosen), "precision": chosen.name}


def auto_label(chosen: Precision) -> str:
    """'auto picks fp32 on cpu: this CPU has no native bf16 ...': a table cell that says what and why."""
    return f"auto picks {chosen.name} on {chosen.record()['device']}: {chosen.reason.removeprefix('auto: ')}"

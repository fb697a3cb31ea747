"""How benchmark results are printed: one line on the machine they were measured on, rows as a markdown table."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

import torch

from vitkit.device import cpu_flags, cpu_model
from vitkit.precision import native_bf16_units

SHOWN_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")  # what the CPU's arithmetic can do


def environment() -> str:
    """One line on what the numbers were measured on: CPU model and its native bf16 units, GPU, torch, threads,
    load average (the machine may be shared)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    flags = " ".join(f for f in SHOWN_FLAGS if f in cpu_flags()) or "none of " + " ".join(SHOWN_FLAGS)
    bf16 = "native bf16" if native_bf16_units() else "no native bf16 units"
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (
        f"{cpu_model()} (flags {flags}: {bf16}){gpu}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()} "
        f"{os.cpu_count()} logical CPUs, load average {load:.1f} at start"
    )


def format_table(rows: list[dict], columns: Sequence[str] | None = None) -> str:
    """Markdown table; floats with 3 significant digits (ratios and MFU with 3 decimals)."""
    if not rows:
        return ""
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))

    def cell(key: str, value: object) -> str:
        if value is None or value == "":
            return ""
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            if key in ("MFU", "spread"):
                return f"{100 * value:.1f}%"
            if key.startswith("vs "):
                return f"{value:.3f}"
            return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(c, row.get(c)) for c in columns) + " |")
    return "\n".join(lines)

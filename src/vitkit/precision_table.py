"""The measured bf16/fp32 speed ratios `auto` decides by where it does not measure (precision_table.json).

A row is one kind of CPU (`amx`: amx_bf16; `avx512_bf16`: avx512_bf16 without AMX; `none`: bf16 emulated), one
mode (`inference`: vitkit's forward pass with the weights held in bf16; `training`: forward, backward and AdamW
step under autocast) and one shape of work: the model's width, its tokens per image and the batch. The gain of bf16
follows these, not the parameter count: wide products at many rows per product (width, tokens x batch) gain most,
and a narrow model at batch 1 is mostly casts and small products. `vitkit bench precision --table FILE` measures
the rows on the machine it runs on; the nearest row of the CPU's kind and the work's mode decides (distance: the
sum of the log ratios of width, tokens and batch).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

MODES = ("inference", "training")
CPU_KINDS = ("amx", "avx512_bf16", "none")
TABLE_FILE = "precision_table.json"


@dataclass(frozen=True)
class WorkShape:
    """What the bf16 gain depends on: the mode, the model's width, its tokens per image and the batch."""

    mode: str
    width: int
    tokens: int
    batch: int

    def describe(self) -> str:
        return f"{self.mode}, width {self.width}, {self.tokens} tokens, batch {self.batch}"


@dataclass(frozen=True)
class TableRow:
    """One measured ratio: bf16 images/s over fp32 images/s for `shape` on a CPU of `kind`."""

    kind: str
    shape: WorkShape
    bf16_speedup: float
    model: str
    source: str

    def describe(self) -> str:
        return (
            f"table row {self.kind}/{self.shape.mode} {self.model} at batch {self.shape.batch} "
            f"(width {self.shape.width}, {self.shape.tokens} tokens): bf16 {self.bf16_speedup:.2f}x fp32's speed"
        )


def cpu_kind(flags: frozenset[str]) -> str:
    """'amx', 'avx512_bf16' (without AMX) or 'none' (bf16 emulated), from the CPU's flags."""
    if "amx_bf16" in flags:
        return "amx"
    return "avx512_bf16" if "avx512_bf16" in flags else "none"


def model_shape(model: Any, mode: str, batch: int) -> WorkShape:
    """The WorkShape of `model` (a vitkit model: its `config` read as values) at `batch`: width and tokens of
    the transformer; a ResNet counts its last stage's channels as width and its final grid as tokens."""
    config = model.config
    height, width_px = config.input_size[1:]
    if hasattr(config, "hidden_size"):
        stride_h, stride_w = config.patch_size
        if config.resnet_layers is not None:  # the hybrid's patches are taken from a feature map of stride 16
            stride_h, stride_w = 16 * stride_h, 16 * stride_w
        tokens = (height // stride_h) * (width_px // stride_w) + (config.classifier == "token")
        return WorkShape(mode, config.hidden_size, max(tokens, 1), batch)
    channels = 256 * 2 ** (len(config.layers) - 1) * config.width_factor  # BiT's last stage
    return WorkShape(mode, channels, max((height // 32) * (width_px // 32), 1), batch)


@functools.cache
def load_table(path: Path | None = None) -> list[TableRow]:
    """The rows of `path`, or of the table shipped with the package."""
    text = path.read_text() if path else resources.files("vitkit").joinpath(TABLE_FILE).read_text()
    where = path or TABLE_FILE
    try:
        data = json.loads(text)
        return [
            TableRow(
                r["kind"],
                WorkShape(r["mode"], int(r["width"]), int(r["tokens"]), int(r["batch"])),
                float(r["bf16_speedup"]),
                r["model"],
                r.get("source", data.get("source", "")),
            )
            for r in data["rows"]
        ]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"{where}: expected {{'rows': [{{kind, mode, width, tokens, batch, bf16_speedup, model}}, ...]}}: {error}"
        ) from None


def nearest_row(rows: list[TableRow], kind: str, shape: WorkShape) -> TableRow | None:
    """The row of this CPU kind nearest to `shape`, in its mode when the table has that mode for this kind."""
    mine = [r for r in rows if r.kind == kind]
    same_mode = [r for r in mine if r.shape.mode == shape.mode]
    candidates = same_mode or mine
    if not candidates:
        return None

    def distance(row: TableRow) -> float:
        return sum(
            abs(math.log(a / b))
            for a, b in (
                (shape.width, row.shape.width),
                (shape.tokens, row.shape.tokens),
                (shape.batch, row.shape.batch),
            )
        )

    return min(candidates, key=distance)


def table_rows(rows: list[dict], source: str) -> dict:
    """The JSON document of measured `rows` (dicts of TableRow's fields), as `load_table` reads it."""
    return {"source": source, "rows": rows}

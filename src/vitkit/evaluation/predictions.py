"""Predictions a program reads: one record per image (top-k names and probabilities, or the error), written as
JSON Lines or CSV by the file's extension, atomically."""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitkit.storage import atomic_write_text

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


@dataclass
class Prediction:
    """The top-k classes of one image (best first), or why it could not be classified."""

    path: str
    classes: list[str] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"path": self.path, "error": self.error}
        return {"path": self.path, "classes": self.classes, "indices": self.indices, "probs": self.probs}

    def as_row(self, k: int) -> dict[str, Any]:
        """path, error, then class_i, index_i, prob_i for rank i = 1..k (empty for an error)."""
        row: dict[str, Any] = {"path": self.path, "error": self.error or ""}
        for rank in range(k):
            present = rank < len(self.classes)
            row[f"class_{rank + 1}"] = self.classes[rank] if present else ""
            row[f"index_{rank + 1}"] = self.indices[rank] if present else ""
            row[f"prob_{rank + 1}"] = f"{self.probs[rank]:.6g}" if present else ""
        return row


def output_format(path: str | os.PathLike) -> str:
    """'jsonl' or 'csv' from the extension; a ValueError naming the file otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"{path}: unknown output format {suffix or '(no extension)'!r}; expected {', '.join(FORMATS)}"
        )
    return FORMATS[suffix]


def write_predictions(path: str | os.PathLike, predictions: list[Prediction], k: int) -> None:
    """One line (JSON Lines) or row (CSV, header first) per image, in the order given."""
    if output_format(path) == "jsonl":
        text = "".join(json.dumps(p.as_json()) + "\n" for p in predictions)
    else:
        buffer = io.StringIO()
        columns = ["path", "error"] + [
            f"{c}_{r}" for r in range(1, k + 1) for c in ("class", "index", "prob")
        ]
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(p.as_row(k) for p in predictions)
        text = buffer.getvalue()
    atomic_write_text(path, text)

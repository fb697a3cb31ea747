"""`export_onnx`: a vitkit model as an ONNX file that ONNX Runtime serves without PyTorch or vitkit.

torch.onnx's dynamo exporter (`torch.export` then onnxscript), not the TorchScript one: it is torch's default
and maintained path, the TorchScript tracer is deprecated, and the tracer freezes the batch size into the
'relative' position embedding's index expansion (ONNX Runtime then fails at any other batch size). One graph
capture serves both exports: a model that exports to `.pt2` exports to ONNX.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from vitkit.export.check import FP32_TOLERANCE, ExportCheck, compare
from vitkit.export.metadata import METADATA_KEY, dumps, loads, serving_metadata
from vitkit.export.quantize import quantize_int8
from vitkit.export.requirements import require
from vitkit.export.staging import staged
from vitkit.export.trace import export_graph, exportable, math_attention

INPUT_NAME, OUTPUT_NAME, BATCH_DIM = "pixels", "logits", "batch"
Log = Callable[[str], None]


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    int8: bool = False,
    tolerance: float = FP32_TOLERANCE,
    log: Log | None = print,
) -> list[ExportCheck]:
    """Write `model` (float32, eval mode; with `int8`, its weights quantised) as ONNX with a free batch size and
    the serving metadata, after ONNX Runtime has reproduced PyTorch's logits on it.

    The float32 graph must match within `tolerance` (largest absolute logit difference) at batch sizes 1 and 7,
    else ExportMismatch and no file. The int8 file's difference and top-1 agreement are reported, not bounded:
    quantisation changes logits by design (its accuracy is measured on data: `vitkit.export.onnx_top1`).
    Returns the checks, in the order they ran.
    """
    onnx = require("onnx")
    require("onnxscript")  # the exporter's translator; named here, not deep inside torch.onnx
    model = exportable(model)
    program = _onnx_program(model)
    checks = []
    with staged(path) as target:
        # int8: the float32 file (and its external data, if any) in a directory of its own, removed once quantised
        fp32_path = target.parent / "fp32" / target.name if int8 else target
        fp32_path.parent.mkdir(exist_ok=True)
        program.save(str(fp32_path))
        onnx.checker.check_model(str(fp32_path), full_check=True)
        checks.append(compare(model, runner(fp32_path), "ONNX Runtime fp32", tolerance=tolerance))
        if int8:
            quantize_int8(fp32_path, target)
            shutil.rmtree(fp32_path.parent)
            onnx.checker.check_model(str(target))
            checks.append(compare(model, runner(target), "ONNX Runtime int8", tolerance=None))
        if log is not None:
            for check in checks:
                log(check.summary())
    return checks


def _onnx_program(model: nn.Module) -> Any:
    """The ONNXProgram of `model` with named inputs, a batch dimension called 'batch' and the metadata."""
    ir = require("onnx_ir")
    import torch.onnx

    with (
        math_attention(),
        warnings.catch_warnings(),
    ):  # warnings: deprecation notices of the exporter's imports
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            export_graph(exportable(model)),
            dynamo=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            verbose=False,
        )
    assert program is not None  # the dynamo exporter returns the program
    onnx_model = program.model
    for value in (*onnx_model.graph.inputs, *onnx_model.graph.outputs):
        assert value.shape is not None  # the exporter records every input and output shape
        value.shape = ir.Shape([ir.SymbolicDim(BATCH_DIM), *list(value.shape)[1:]])
    onnx_model.metadata_props[METADATA_KEY] = dumps(serving_metadata(model))
    return program


def onnx_session(path: str | os.PathLike, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session of `path` (all graph optimisations on)."""
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def runner(path: str | os.PathLike, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """float32 images [B, C, H, W] -> logits, through ONNX Runtime."""
    session = onnx_session(path, threads)
    return lambda x: session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]


def read_onnx_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The serving metadata of a vitkit ONNX export (class names, input size, normalisation, ...)."""
    onnx = require("onnx")
    model = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    if METADATA_KEY not in props:
        raise ValueError(f"{Path(path)}: no '{METADATA_KEY}' metadata; not a vitkit ONNX export")
    return loads(props[METADATA_KEY], str(path))

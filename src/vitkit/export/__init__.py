"""Serving exports: ONNX (optionally int8) and `torch.export` programs, each checked against PyTorch.

onnx, onnxruntime and onnxscript come with the extra `serve`; they are imported only when an ONNX export runs.
"""

from vitkit.export.check import ExportCheck, ExportMismatch
from vitkit.export.onnx_export import export_onnx, read_onnx_metadata
from vitkit.export.program_export import export_program, load_program

__all__ = [
    "ExportCheck",
    "ExportMismatch",
    "export_onnx",
    "export_program",
    "load_program",
    "read_onnx_metadata",
]

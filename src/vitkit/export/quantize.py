"""int8 weights for CPU serving: ONNX Runtime's dynamic quantisation of the matrix products.

Dynamic, not static: the weights are quantised once (per output channel, signed 8 bits) and each activation
tensor is quantised on the fly from its own range, so no calibration set is needed and nothing depends on how
well one represents the data a server will see. A ViT spends its time in the MatMul/Gemm of its dense layers,
where ONNX Runtime's int8 kernels (VNNI, AMX where present) run; LayerNorm, softmax, GELU and the patch
convolution stay in float32, which keeps the accuracy loss small (docs/SERVING.md measures it).

ONNX Runtime advises its pre-processing pass (shape inference and graph optimisation) first; on ViT-B/16 it made
the int8 model slower (docs/SERVING.md has the timings), so it is not run and its advice is kept off the log.
"""

from __future__ import annotations

import logging
import os

from vitkit.export.requirements import require

QUANTISED_OPS = ["MatMul", "Gemm"]


def quantize_int8(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Write `src` (a float32 ONNX file) to `dst` with int8 MatMul/Gemm weights; metadata kept."""
    quantization = require("onnxruntime.quantization")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the pre-processing advice (see above), logged on the root logger
    try:
        quantization.quantize_dynamic(
            str(src),
            str(dst),
            op_types_to_quantize=QUANTISED_OPS,
            per_channel=True,
            weight_type=quantization.QuantType.QInt8,
            use_external_data_format=False,
        )
    finally:
        root.setLevel(level)

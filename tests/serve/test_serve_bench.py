"""`vitkit bench serve`: every runtime timed side by side, their logits compared with eager float32."""

from __future__ import annotations

import json

import pytest
import torch

from vitkit.bench.candidates import bench_model
from vitkit.cli import main
from vitkit.packed_linear import packs

pytest.importorskip("onnxruntime")


@pytest.mark.slow
def test_serve_bench_times_every_runtime_and_compares_logits(tmp_path, capsys) -> None:
    rows_file = tmp_path / "rows.json"
    argv = ["bench", "serve", "--models", "ViT-Ti/16", "--batch-sizes", "1,2", "--rounds", "1"]
    assert (
        main([*argv, "--warmup", "1", "--threads", "1", "--no-compile", "--json", str(rows_file), "--quiet"])
        == 0
    )
    out = capsys.readouterr().out
    rows = json.loads(rows_file.read_text())
    model = bench_model("ViT-Ti/16")
    packed = ["fp32", *(["bf16"] if packs(model.to(torch.bfloat16)) else [])] if packs(model) else []
    assert [(r["batch"], r["runtime"], r["precision"]) for r in rows] == [
        (batch, runtime, precision)
        for batch in (1, 2)
        for runtime, precision in (
            ("eager", "fp32"),
            ("eager", "bf16"),
            *(("packed", precision) for precision in packed),
            ("onnxruntime", "fp32"),
            ("onnxruntime", "int8"),
        )
    ]
    by_key = {(r["batch"], r["runtime"], r["precision"]): r for r in rows}
    for batch in (1, 2):
        assert by_key[batch, "eager", "fp32"]["vs eager fp32"] == 1.0
        if packed:  # the layers vitkit serve runs: float32's logits as plain PyTorch's
            assert by_key[batch, "packed", "fp32"]["max |logit diff|"] < 1e-4
        assert by_key[batch, "onnxruntime", "fp32"]["max |logit diff|"] < 1e-4
        assert 0 < by_key[batch, "onnxruntime", "int8"]["max |logit diff|"] < 0.5
        assert all(r["images/s"] > 0 and r["latency ms"] > 0 for r in rows if r["batch"] == batch)
    assert "| ViT-Ti/16 | 2 | onnxruntime | int8 |" in out

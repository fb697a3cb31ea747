"""benchmarks/gpu_training_mfu.py, the script a lent GPU runs in one call, runs here on the CPU as its own smoke
test: every implementation trains, and each row's FLOPs are vitkit's count of the model it times."""

import importlib.util
from pathlib import Path

import pytest

from vitkit import create_model
from vitkit.flops import count_flops

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_training_mfu.py"


@pytest.mark.slow
def test_the_gpu_mfu_script_runs_on_a_cpu(tmp_path):
    pytest.importorskip("timm")
    spec = importlib.util.spec_from_file_location("gpu_training_mfu", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = "--device cpu --model ViT-Ti/16 --img-size 32 --batch-size 4 --steps 1 --rounds 1 --warmup 1 --sdpa math"
    rows = script.main([*argv.split(), "--profile", str(tmp_path / "profile.txt")])
    by_name = {row["implementation"]: row for row in rows}
    assert set(by_name) == {"vitkit engine", "timm, plain loop", "bf16 matmul 8192^3 (ceiling)"}
    model = create_model("ViT-Ti/16", img_size=32, num_classes=1000)
    size = model.config.input_size
    assert by_name["vitkit engine"]["train GFLOPs/image"] == round(3 * count_flops(model, size) / 1e9, 1)
    timm_flops = 3 * count_flops(model, size, every_token=True) / 1e9
    assert by_name["timm, plain loop"]["train GFLOPs/image"] == round(timm_flops, 1)
    assert all(by_name[name]["images/s"] > 0 for name in ("vitkit engine", "timm, plain loop"))
    assert by_name["bf16 matmul 8192^3 (ceiling)"]["TFLOP/s"] > 0
    assert "aten::linear" in (tmp_path / "profile.txt").read_text()  # the engine's kernels, by time

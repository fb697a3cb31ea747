"""benchmarks/gpu_training_mfu.py, the script a lent GPU runs in one call, runs here on the CPU as its own smoke
test: every implementation trains, eager and compiled (max-autotune), each row's FLOPs are vitkit's count of the
model it times, and the profile has both of the engine's steps."""

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
    argv += " --compile --max-autotune"
    autotune = ("max_autotune", "coordinate_descent_tuning")  # inductor options the script sets
    with script.inductor_config.patch(dict.fromkeys(autotune, False)):  # restored after the script
        rows = script.main([*argv.split(), "--profile", str(tmp_path / "profile.txt")])
        assert all(getattr(script.inductor_config, option) for option in autotune)
    by_name = {row["implementation"]: row for row in rows}
    engine = ("vitkit engine", "vitkit engine, compiled")
    peer = ("timm, plain loop", "timm, plain loop, compiled")
    assert set(by_name) == {*engine, *peer, "bf16 matmul 8192^3 (ceiling)"}
    model = create_model("ViT-Ti/16", img_size=32, num_classes=1000)
    size = model.config.input_size
    performed, every_token = count_flops(model, size), count_flops(model, size, every_token=True)
    for name in engine:
        assert by_name[name]["train GFLOPs/image"] == round(3 * performed / 1e9, 1)
    for name in peer:
        assert by_name[name]["train GFLOPs/image"] == round(3 * every_token / 1e9, 1)
    assert all(by_name[name]["images/s"] > 0 for name in (*engine, *peer))
    assert by_name["bf16 matmul 8192^3 (ceiling)"]["TFLOP/s"] > 0
    eager, compiled = (tmp_path / "profile.txt").read_text().split("1 compiled steps")
    assert "1 eager steps" in eager and "aten::linear" in eager  # the engine's kernels, by time
    assert "CompiledFunction" in compiled

"""The precision policy decides by device, CPU flags and a measurement: tested on a faked AMX CPU and a faked
Zen 3 CPU, whatever this machine is; CUDA for real only where there is a GPU."""

import time

import pytest
import torch

from vitkit import cli, device, precision
from vitkit.bench import table, train_precision
from vitkit.bench.options import auto_row, bench_dtypes
from vitkit.bench.table import environment
from vitkit.bench.training import Workload
from vitkit.precision import Precision, choose_precision, inference_precision

AMX_LIKE = frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})  # Sapphire Rapids
ZEN3_LIKE = frozenset({"avx", "avx2", "fma", "sha_ni"})  # AMD EPYC Milan: no native bf16

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def fake_cpu(monkeypatch, flags: frozenset[str]) -> None:
    """The policy and the bench tables' environment line both read these flags."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    monkeypatch.setattr(table, "cpu_flags", lambda: flags)


def sleeping_step(fp32_s: float, bf16_s: float, calls: list):
    """A step that takes `fp32_s` in float32 and `bf16_s` under bf16, and records the dtypes it ran in."""

    def step(dtype):
        calls.append(dtype)
        time.sleep(bf16_s if dtype == torch.bfloat16 else fp32_s)

    return step


def never_measured(dtype):
    raise AssertionError("auto must not measure here")


def test_zen3_like_cpu_is_fp32_without_measuring(monkeypatch):
    fake_cpu(monkeypatch, ZEN3_LIKE)
    chosen = choose_precision("auto", "cpu", measure=never_measured)
    assert chosen.name == "fp32" and chosen.autocast_dtype is None
    assert "no native bf16 matrix units" in chosen.reason and "amx_bf16" in chosen.reason


def test_amx_like_cpu_picks_bf16_when_measured_faster(monkeypatch):
    fake_cpu(monkeypatch, AMX_LIKE)
    calls = []
    chosen = choose_precision(
        "auto", "cpu", measure=sleeping_step(0.03, 0.005, calls), key="m", what="a step"
    )
    assert chosen.name == "bf16" and chosen.autocast_dtype == torch.bfloat16
    assert "amx_bf16 and avx512_bf16" in chosen.reason and "bf16 measured faster" in chosen.reason
    assert (
        calls.count(None) == calls.count(torch.bfloat16) == precision.WARMUP_CALLS + precision.MEASURE_ROUNDS
    )
    assert calls[: 2 * precision.WARMUP_CALLS] == [None] * 2 + [torch.bfloat16] * 2  # warm-up first
    # cached per process: the same key is not measured again
    assert choose_precision("auto", "cpu", measure=never_measured, key="m").name == "bf16"


def test_amx_like_cpu_keeps_fp32_when_bf16_measures_slower(monkeypatch):
    fake_cpu(monkeypatch, AMX_LIKE)
    chosen = choose_precision("auto", "cpu", measure=sleeping_step(0.005, 0.03, []), key="small model")
    assert chosen.name == "fp32" and "bf16 measured slower" in chosen.reason


def test_the_measurement_leaves_the_random_stream_alone(monkeypatch):
    fake_cpu(monkeypatch, AMX_LIKE)
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    choose_precision("auto", "cpu", measure=lambda dtype: torch.rand(100))
    assert torch.equal(torch.rand(3), expected)


def test_inference_precision_measures_the_models_forward(monkeypatch, tiny_vit):
    fake_cpu(monkeypatch, AMX_LIKE)
    monkeypatch.setattr(precision, "unmeasured_rule", lambda *a: None)  # where auto measures (an unsure row)
    model = tiny_vit(img_size=8, in_chans=1)
    seen = []
    model.register_forward_hook(lambda m, args, out: seen.append((args[0].shape, out.dtype)))
    chosen = inference_precision("auto", model, batch_size=100)
    key = ("inference", precision.model_signature(model), (32, 1, 8, 8), "cpu")
    (fp32_s, bf16_s), _ = precision.stored_seconds(key)  # what it measured, kept for later calls
    assert chosen.name == ("bf16" if bf16_s < fp32_s else "fp32")
    assert "per call of a forward pass at batch 32" in chosen.reason
    assert {(torch.Size([32, 1, 8, 8]), torch.bfloat16), (torch.Size([32, 1, 8, 8]), torch.float32)} <= set(
        seen
    )
    with pytest.raises(TypeError, match="Linear is not a vitkit model"):
        inference_precision("auto", torch.nn.Linear(2, 3), batch_size=100)


def test_explicit_choices_are_kept_and_bad_names_refused(monkeypatch):
    fake_cpu(monkeypatch, ZEN3_LIKE)
    forced = choose_precision("bf16", "cpu", measure=never_measured)
    assert forced.name == "bf16" and "emulated" in forced.reason
    fake_cpu(monkeypatch, AMX_LIKE)
    assert choose_precision("bf16", "cpu").reason == "asked for"
    assert choose_precision("fp32", "cpu", measure=never_measured).name == "fp32"
    with pytest.raises(ValueError, match=r"precision must be one of \['auto', 'bf16', 'fp32'\], got 'fp16'"):
        choose_precision("fp16", "cpu")


def test_cuda_auto_follows_bf16_support_without_measuring(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert choose_precision("auto", "cuda", measure=never_measured).name == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    chosen = choose_precision("auto", "cuda:0", measure=never_measured)
    assert chosen.name == "fp32" and "no bf16 support" in chosen.reason


def test_record_names_precision_reason_and_device():
    record = Precision("fp32", "asked for", torch.device("cpu")).record()
    assert record == {"precision": "fp32", "precision_reason": "asked for", "device": "cpu"}


def test_cpu_flags_are_read_from_cpuinfo(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 avx512_bf16\nbugs\t\t: none\n")
    monkeypatch.setattr(device, "CPUINFO", cpuinfo)
    device.cpu_flags.cache_clear()
    try:
        assert precision.native_bf16_units() == ["amx_bf16", "avx512_bf16"]
        monkeypatch.setattr(device, "CPUINFO", tmp_path / "missing")
        device.cpu_flags.cache_clear()
        assert precision.native_bf16_units() == []
    finally:
        device.cpu_flags.cache_clear()


@needs_cuda
def test_cuda_inference_runs_in_bf16_and_records_the_gpu(tiny_vit):
    model = tiny_vit().cuda()
    chosen = inference_precision("auto", model, batch_size=8)
    assert chosen.name == "bf16" and chosen.record()["device"].startswith("cuda:")
    with chosen.autocast():
        assert model(torch.randn(8, 3, 16, 16, device="cuda")).dtype == torch.bfloat16


def test_bench_tables_say_what_auto_picks_and_why(monkeypatch, tiny_vit):
    model = tiny_vit()
    fake_cpu(monkeypatch, ZEN3_LIKE)
    row = auto_row(model, 8)
    assert row["precision"] == "fp32"
    assert row["implementation"].startswith(
        "auto picks fp32 on cpu: this CPU has no native bf16 matrix units"
    )
    assert "flags avx2 fma: no native bf16 units" in environment()
    fake_cpu(monkeypatch, AMX_LIKE)
    assert "flags avx2 fma avx512f avx512_bf16 amx_bf16: native bf16" in environment()
    row = auto_row(model, 8)
    picked, _ = precision.table_precision(precision.model_shape(model, "inference", 8), torch.device("cpu"))
    assert row["precision"] == picked.name and row["implementation"].startswith(
        f"auto picks {picked.name} on cpu: CPU with"
    )
    assert "table row amx/inference" in row["implementation"]
    assert bench_dtypes("both") == {"fp32": None, "bf16": torch.bfloat16} and bench_dtypes("fp32") == {
        "fp32": None
    }


def test_bench_precision_times_both_and_says_what_auto_picks(monkeypatch):
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")
    fake_cpu(monkeypatch, ZEN3_LIKE)
    torch.set_num_threads(1)  # restored by tiny.restore_threads
    rows = train_precision.training_precision(batch_size=8, rounds=1, steps=1, gemm_size=32, clock="cpu")
    names = [row["precision"] for row in rows]
    assert names[:4] == ["fp32", "bf16", "GEMM 32^3 fp32 (ceiling)", "GEMM 32^3 bf16 (ceiling)"]
    assert rows[0]["vs fp32"] == 1.0 and rows[1]["images/s"] > 0 and rows[1]["vs fp32"] > 0
    assert names[4].startswith("auto picks fp32 on cpu: this CPU has no native bf16 matrix units")
    assert all(row["model"].startswith("ViT-Mini/4 0.31M at 28") and row["batch"] == 8 for row in rows)


def test_bench_workload_takes_another_model_at_its_own_size(monkeypatch):
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")
    workload = Workload.load(batch_size=4, model="ViT-S/16")
    assert workload.config.model.name == "ViT-S/16" and workload.model.config.img_size == (224, 224)
    x, _ = workload.transform()(workload.dataset.images[:4], workload.dataset.labels[:4], torch.arange(4), 0)
    assert x.shape == (4, 3, 224, 224)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--out", "o"],
        ["finetune", "--weights", "w", "--out", "o"],
        ["eval", "--weights", "w"],
        ["predict", "x.png", "--weights", "w"],
        ["fewshot", "--weights", "w"],
        ["inspect", "--weights", "w", "--images", "x.png", "--out", "o"],
        ["demo"],
        *(["bench", name] for name in ("inference", "batch", "memory", "resolution")),
    ],
)
def test_every_entry_point_takes_a_precision(argv):
    """(`vitkit bench precision` times both and says what auto picks.)"""
    choice = "bf16"
    args = cli.build_parser().parse_args([*argv, "--precision", choice])
    assert args.precision == choice

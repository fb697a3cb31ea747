"""The benchmark utilities: alternation order, paired ratios and medians, memory accounting, peers with the same
weights computing the same logits. Functional only -- nothing here asserts a speed."""

import importlib
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import vitkit
import vitkit.bench
from tiny import TINY_VIT_GRID_CONFIG
from vitkit.bench import memory, timing
from vitkit.bench.peers import build_peer, check_same_outputs
from vitkit.bench.table import format_table

SMALL = dict(img_size=28, gemm_size=64)  # 49 tokens and a small ceiling: the rows, not the speed, are tested


def test_alternate_rotates_the_order_and_keeps_one_sample_per_round():
    calls = []
    candidates = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    results = timing.alternate(candidates, rounds=3, warmup=1)
    assert calls[:3] == ["a", "b", "c"]  # warm-up
    assert calls[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(len(r.samples) == 3 for r in results.values())
    with pytest.raises(ValueError):
        timing.alternate(candidates, rounds=0)


def test_medians_rates_and_paired_ratios():
    a = timing.Result("a", [1.0, 2.0, 10.0], images=8, flops=8e9)
    b = timing.Result("b", [2.0, 4.0, 4.0], images=8, flops=8e9)
    assert a.median == 2.0 and a.best == 1.0 and a.images_per_s == 4.0 and a.gflops_per_s == 4.0
    results = {"a": a, "b": b}
    # per round t_b / t_a = 2, 2, 0.4: the paired median ignores the one disturbed round of a
    assert timing.paired_ratio(results, "a", "b") == 2.0
    assert timing.ratio_range(results, "a", "b") == (0.4, 2.0)
    assert timing.paired_ratio(results, "b", "b") == 1.0
    # different images per call compare per image
    c = timing.Result("c", [2.0, 4.0, 20.0], images=16)
    assert timing.paired_ratio({"a": a, "c": c}, "c", "a") == 1.0


@pytest.mark.parametrize("n,calls", [(64, 2), (48, 3)])
def test_gemm_candidate_counts_the_flops_torch_counts(n, calls):
    fn, flops = timing.gemm_candidate(n=n, calls=calls)
    with FlopCounterMode(display=False) as counter:
        fn()
    assert flops == counter.get_total_flops()


def test_peak_of_events_is_the_high_water_mark_of_the_running_sum():
    events = [(3, -100), (1, 100), (2, 50), (4, 200), (5, -250)]
    assert memory.peak_of_events(events) == 250  # in time order: 100, 150, 50, 250, 0
    assert (
        memory.peak_of_events([(1, -10), (2, 5)]) == 0
    )  # frees of memory allocated before never go negative-peak


def test_peak_allocated_bytes_sees_cpu_tensors():
    mib = 2**20

    def fn():
        a = torch.empty(mib, dtype=torch.float32)  # 4 MiB
        b = torch.empty(mib // 2, dtype=torch.float32)  # 2 MiB alongside
        del a, b
        torch.empty(mib, dtype=torch.float32)  # 4 MiB after both were freed

    peak = memory.peak_allocated_bytes(fn)
    assert 6 * mib <= peak < 7 * mib


def test_memory_fit_and_largest_batch():
    fit = memory.fit_memory(lambda b: 100 + 30 * b, resident=1000, batches=(1, 3))
    assert fit.fixed == pytest.approx(100) and fit.per_image == pytest.approx(30)
    assert fit.peak(2) == pytest.approx(1160)
    assert fit.largest_batch(1160) == 2 and fit.largest_batch(1189) == 2 and fit.largest_batch(500) == 0


def test_resident_bytes_counts_parameters_and_optimizer_state_once():
    layer = torch.nn.Linear(10, 10)
    params = 110 * 4
    assert memory.resident_bytes(layer) == params
    opt = torch.optim.AdamW(layer.parameters())
    layer(torch.randn(2, 10)).sum().backward()
    opt.step()
    # two moments per parameter (+ the scalar step counters)
    assert 3 * params <= memory.resident_bytes(layer, opt) <= 3 * params + 64


# importing transformers takes seconds: that case runs with the slow tests
@pytest.mark.parametrize(
    "peer", ["timm", pytest.param("transformers", marks=pytest.mark.slow), "torchvision"]
)
def test_peers_get_identical_weights_and_compute_the_same_logits(peer):
    torch.manual_seed(0)
    model = vitkit.create_model("ViT-B/16", **TINY_VIT_GRID_CONFIG).eval()
    torch.nn.init.normal_(model.head.weight)  # the zero head would make any peer agree
    other = build_peer(peer, model)
    assert not other.training
    x = torch.randn(3, 3, 32, 32)
    assert check_same_outputs(model, other, x) < 1e-4
    with torch.no_grad():
        model.head.bias.add_(1.0)  # a different model: the check must notice
    with pytest.raises(ValueError, match="disagrees"):
        check_same_outputs(model, other, x)


@pytest.mark.slow  # imports transformers
@pytest.mark.parametrize(
    ("name", "classes"), [("DINOv2-S/14-reg4", 0), ("CLIP-B/16-quickgelu", 10), ("SigLIP-B/16", 0)]
)
def test_the_transformers_peer_of_a_family_returns_what_vitkit_returns(name, classes):
    """A family's transformers tower has no logits: the peer returns its projected (CLIP's head is the
    projection) or pooled output."""
    torch.manual_seed(0)
    model = vitkit.create_model(name, **{**TINY_VIT_GRID_CONFIG, "num_classes": classes}).eval()
    if model.config.num_classes:
        torch.nn.init.normal_(model.head.weight)
    assert check_same_outputs(model, build_peer("transformers", model), torch.randn(2, 3, 32, 32)) < 1e-4


def test_peers_refuse_what_they_cannot_express():
    with pytest.raises(ValueError):
        build_peer("torchvision", vitkit.create_model("ViT-B/16", **TINY_VIT_GRID_CONFIG, classifier="gap"))
    with pytest.raises(ValueError):
        build_peer("nope", vitkit.create_model("ViT-B/16", **TINY_VIT_GRID_CONFIG))
    with pytest.raises(ValueError, match="layer_scale, num_reg_tokens, prefix_pos_embed"):
        build_peer("torchvision", vitkit.create_model("DINOv2-S/14-reg4", **TINY_VIT_GRID_CONFIG))


def test_format_table():
    rows = [
        {"implementation": "vitkit", "images/s": 4.3, "MFU": 0.951, "vs vitkit": 1.0},
        {"implementation": "gemm"},
    ]
    table = format_table(rows).splitlines()
    assert table[0] == "| implementation | images/s | MFU | vs vitkit |"
    assert table[2] == "| vitkit | 4.3 | 95.1% | 1.000 |"
    assert table[3] == "| gemm |  |  |  |"


def test_peak_memory_sees_the_activations_gradient_checkpointing_saves():
    torch.manual_seed(0)
    model = vitkit.create_model("ViT-B/16", **{**TINY_VIT_GRID_CONFIG, "depth": 4, "img_size": 64}).train()
    x = torch.randn(16, 3, 64, 64)

    def step():
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)

    plain = memory.peak_allocated_bytes(step)
    model.set_grad_checkpointing(True)
    checkpointed = memory.peak_allocated_bytes(step)
    assert checkpointed < 0.6 * plain


@pytest.mark.slow
def test_bench_command_runs_end_to_end(capsys):
    from vitkit.cli import main

    code = main(
        [
            "bench",
            "inference",
            "--model",
            "ViT-S/16",
            "--img-size",
            "32",
            "--batch-size",
            "2",
            "--rounds",
            "1",
            "--peers",
            "timm",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| ViT-S/16 | 2 | vitkit |" in out and "| ViT-S/16 | 2 | timm |" in out and "GEMM 2048^3" in out


def test_every_benchmark_module_is_a_sub_command_that_runs_itself():
    """The options live apart from the benchmarks (no torch for `vitkit bench --help`): none is forgotten, and each
    sub-command runs the module whose NAME it has."""
    from vitkit import cli
    from vitkit.commands._arguments import source_literals
    from vitkit.commands.parsers.bench import BENCHMARKS

    modules = Path(vitkit.bench.__file__).parent.glob("*.py")
    assert sorted(BENCHMARKS) == sorted(p.stem for p in modules if source_literals(p, ["NAME"]))
    parser = cli.build_parser("bench")
    for stem in BENCHMARKS:
        module = importlib.import_module(f"vitkit.bench.{stem}")
        args = parser.parse_args(["bench", module.NAME, *(["ROOT"] if stem == "input_pipeline" else [])])
        assert args.benchmark_module == module.__name__ and callable(module.run)


def test_inference_bench_times_vitkits_bf16_path_beside_autocast_alone(monkeypatch):
    """In bf16 the vitkit row is its inference path (the weights held in bf16), the
    vitkit-autocast row the same model under autocast as the peers run; fp32 keeps float32 weights."""
    from vitkit.bench import inference
    from vitkit.models.vit import VisionTransformer

    weight_dtypes: dict[str, torch.dtype] = {}
    forward_call = inference.forward_call

    def spy(model, x, dtype=None):
        call = forward_call(model, x, dtype)

        def run():
            if isinstance(model, VisionTransformer):  # vitkit's model: which weights its products read
                weight_dtypes[f"{'bf16' if dtype else 'fp32'} {id(model)}"] = model.blocks[
                    0
                ].mlp.fc1.weight.dtype
            return call()

        return run

    monkeypatch.setattr(inference, "forward_call", spy)
    rows = inference.inference_vs_peers("ViT-Mini/4", 2, peers=["timm"], rounds=1, precision="both", **SMALL)
    names = [(row["implementation"], row["precision"]) for row in rows if "images/s" in row]
    assert names == [
        ("vitkit", "fp32"),
        ("timm", "fp32"),
        ("vitkit", "bf16"),
        ("timm", "bf16"),
        ("vitkit-autocast", "bf16"),
    ]
    assert sorted(weight_dtypes.values(), key=str) == [torch.bfloat16, torch.float32, torch.float32]


def test_inference_bench_credits_each_implementation_with_the_flops_it_performs():
    """vitkit's class-token logits skip the last layer's patch tokens, the peers compute every token: each row's
    GFLOPs/image, GFLOP/s and MFU count its own work."""
    from vitkit.bench import inference
    from vitkit.bench.candidates import bench_model, forward_flops

    rows = inference.inference_vs_peers("ViT-Mini/4", 2, peers=["timm"], rounds=1, precision="bf16", **SMALL)
    model = bench_model("ViT-Mini/4", SMALL["img_size"])
    x = torch.zeros(2, *model.config.input_size)
    own, every_token = forward_flops(model, x) / 2e9, forward_flops(model, x, every_token=True) / 2e9
    assert own < every_token
    timed = [row for row in rows if "images/s" in row]
    assert {row["implementation"] for row in timed} == {"vitkit", "timm", "vitkit-autocast"}
    for row in timed:
        expected = own if row["implementation"].startswith("vitkit") else every_token
        assert row["GFLOPs/image"] == pytest.approx(expected, rel=1e-12)
        assert row["GFLOP/s"] == pytest.approx(row["images/s"] * expected, rel=1e-9)


@pytest.mark.slow
def test_a_peer_without_the_models_parts_is_reported_not_timed():
    """torchvision's ViT has no registers nor LayerScale: a DINOv2 gets a row saying so, timm is timed."""
    from vitkit.bench import inference

    rows = inference.inference_vs_peers(
        "DINOv2-S/14-reg4", 2, peers=["timm", "torchvision"], rounds=1, precision="bf16", **SMALL
    )
    assert {row["implementation"] for row in rows if "images/s" in row} == {
        "vitkit",
        "timm",
        "vitkit-autocast",
    }
    (skipped,) = [row for row in rows if row["implementation"] == "torchvision"]
    assert skipped["precision"].startswith("not timed") and "layer_scale" in skipped["precision"]

"""bf16 against float32, under autocast alone (training, inspection) and in the inference path (weights held
in bf16): the official checkpoints' logits within the documented tolerance, and predictions of a trained-like
model that agree (docs/PRECISION.md)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import vitkit
from vitkit.models import self_attention
from vitkit.precision import Precision

DATA = Path(__file__).resolve().parents[1] / "data" / "official_vit"
BF16_LOGIT_TOLERANCE = 0.02  # of the largest |logit|; measured up to 1.54% (case B, the inference path)
BF16 = Precision("bf16", "asked for", torch.device("cpu"))


WITH_AMX, WITHOUT_AMX = frozenset({"avx512_bf16", "amx_bf16"}), frozenset({"avx512_bf16"})


@pytest.mark.parametrize("path", ["autocast", "inference"])
@pytest.mark.parametrize("flags", [WITH_AMX, WITHOUT_AMX], ids=["fused attention", "unfused attention"])
@pytest.mark.parametrize(
    "case", ["A", "B", "C", pytest.param("D", marks=pytest.mark.slow)]
)  # D: hybrid, ~5 s
def test_official_logits_under_bf16_stay_within_the_tolerance(case, flags, path, monkeypatch):
    # which attention kernel bf16 uses on a CPU
    monkeypatch.setattr(self_attention, "cpu_flags", lambda: flags)
    with np.load(DATA / f"{case}_io.npz") as io:
        x = torch.from_numpy(io["inputs"]).permute(0, 3, 1, 2).contiguous()
        reference = torch.from_numpy(io["logits"])
    model = vitkit.load_weights(DATA / f"{case}_params.npz").eval()
    with torch.no_grad(), BF16.autocast() if path == "autocast" else BF16.inference(model):
        logits = model(x)
    assert logits.dtype == torch.bfloat16  # it did run in bf16
    error = (logits.float() - reference).abs().max().item()
    tolerance = BF16_LOGIT_TOLERANCE * reference.abs().max().item()
    assert 1e-4 < error <= tolerance, error
    # top-1 differs only between classes whose float32 logits lie within two tolerances of each other
    chosen = reference.gather(1, logits.float().argmax(-1, keepdim=True)).squeeze(1)
    assert (chosen >= reference.max(-1).values - 2 * tolerance).all()


@pytest.mark.slow  # ~2 s of emulated bf16 on a CPU without native units (more on a busy machine)
def test_bf16_predictions_agree_with_fp32_on_a_confident_model():
    """A small ViT with a head fitted to separate 10 classes of clustered images (as accurate as a trained model
    on easy data: >= 95% here): bf16 picks the same top-1 class as float32 for >= 99.5% of 400 images."""
    torch.manual_seed(0)
    model = vitkit.create_model(
        "ViT-S/16",
        img_size=32,
        patch_size=8,
        hidden_size=64,
        depth=2,
        num_heads=2,
        mlp_dim=128,
        num_classes=10,
    ).eval()
    labels = torch.arange(400) % 10
    x = torch.randn(10, 3, 32, 32)[labels] + torch.randn(400, 3, 32, 32)  # class prototypes plus noise
    with torch.no_grad():
        features = torch.cat(
            [model.forward_head(model.forward_features(x), pre_logits=True), torch.ones(400, 1)], 1
        )
        head = torch.linalg.lstsq(features, nn.functional.one_hot(labels, 10).float()).solution
        model.head.weight.copy_(head[:-1].T)
        model.head.bias.copy_(head[-1])
        fp32 = model(x).argmax(-1)
        with BF16.autocast():
            autocast = model(x).argmax(-1)
        with BF16.inference(model):
            inference = model(x).argmax(-1)
    assert (fp32 == labels).float().mean() >= 0.95
    assert (autocast == fp32).float().mean() >= 0.995
    assert (inference == fp32).float().mean() >= 0.995


def test_bf16_attention_on_a_cpu_is_fused_only_with_amx_and_without_gradients(monkeypatch):
    """Without AMX tiles torch's fused CPU attention gains nothing from bf16, and its backward is slower than that
    of two bf16 products and a softmax even with them, so vitkit multiplies in bf16 itself there; the CPU's
    flags are read when the model is built; every way agrees with float32."""

    def built_on(flags: frozenset[str]) -> torch.nn.Module:
        monkeypatch.setattr(self_attention, "cpu_flags", lambda: flags)
        torch.manual_seed(0)
        return vitkit.create_model(
            "ViT-S/16", img_size=32, patch_size=8, hidden_size=64, depth=2, num_heads=4, mlp_dim=128
        ).eval()

    models = {flags: built_on(flags) for flags in (WITH_AMX, WITHOUT_AMX)}
    x = torch.randn(4, 3, 32, 32)
    calls = []
    fused = self_attention.F.scaled_dot_product_attention
    monkeypatch.setattr(
        self_attention.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or fused(*a, **k)
    )
    with torch.no_grad():
        reference = models[WITH_AMX](x)
    logits = {}
    for flags, grad, fused_calls in ((WITH_AMX, False, 2), (WITHOUT_AMX, False, 0), (WITH_AMX, True, 0)):
        model = models[flags]
        opposite = WITH_AMX if flags == WITHOUT_AMX else WITHOUT_AMX  # flags read now would choose wrongly
        monkeypatch.setattr(self_attention, "cpu_flags", lambda opposite=opposite: opposite)
        calls.clear()
        with torch.set_grad_enabled(grad), BF16.autocast():
            logits[flags, grad] = model(x).float().detach()
        assert len(calls) == fused_calls, (flags, grad)
    calls.clear()
    model(x)
    assert len(calls) == 2  # fp32, with gradients too: always fused
    for value in logits.values():
        assert (value - reference).abs().max() <= BF16_LOGIT_TOLERANCE * reference.abs().max()


def test_bf16_inference_holds_the_weights_in_bf16_and_puts_the_float32_ones_back():
    """`Precision.inference` casts the parameters and buffers once, so the whole forward pass runs in bf16 (the
    residual stream too), within the tolerance of float32; the float32 parameters (the same objects) are back
    afterwards, also after an error; a hybrid's weight-standardised convolutions are left in float32."""
    torch.manual_seed(0)
    small = dict(hidden_size=64, depth=2, num_heads=2, mlp_dim=128, num_classes=10)
    model = vitkit.create_model(
        "R50+ViT-B/16", img_size=64, resnet_layers=(1,), resnet_width=1, **small
    ).eval()
    torch.nn.init.normal_(model.head.weight)
    x = torch.randn(2, 3, 64, 64)
    before = dict(model.named_parameters())
    residual = []
    model.blocks[0].register_forward_hook(lambda module, args, out: residual.append(out[0].dtype))
    with torch.no_grad():
        reference = model(x)
        with BF16.autocast():
            model(x)
        with BF16.inference(model):
            cast = dict(model.named_parameters())
            logits = model(x)
    assert residual == [torch.float32, torch.float32, torch.bfloat16]  # fp32, autocast, inference
    assert logits.dtype == torch.bfloat16
    assert (logits.float() - reference).abs().max() <= BF16_LOGIT_TOLERANCE * reference.abs().max()
    for name in ("blocks.0.mlp.fc1.weight", "head.weight", "blocks.0.norm1.weight", "pos_embed.weight"):
        assert cast[name].dtype == torch.bfloat16, name
    assert (
        cast["cls_token"].dtype == torch.bfloat16 and cast["backbone.gn_root.weight"].dtype == torch.bfloat16
    )
    assert cast["backbone.conv_root.weight"].dtype == torch.float32  # StdConv2d: standardised in float32
    with pytest.raises(RuntimeError, match="inside"), BF16.inference(model):
        raise RuntimeError("inside")
    after = dict(model.named_parameters())
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert all(p.dtype == torch.float32 and p.requires_grad for p in after.values())
    fp32 = Precision("fp32", "asked for", torch.device("cpu"))
    with fp32.inference(model):
        assert all(p is before[k] for k, p in model.named_parameters())

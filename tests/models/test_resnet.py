"""ResNetV1 (the hybrid's backbone) against the official vit_jax vectors; ResNetV2 (BiT) against timm."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from grad_checkpointing import assert_checkpointing_recomputes
from vitkit.models.config import ResNetConfig
from vitkit.models.resnet import ResNetV1, ResNetV2, StdConv2d, pad_same_tf
from vitkit.precision import choose_precision

DATA = Path(__file__).resolve().parents[1] / "data" / "official_vit"

# name: (layers, width factor, parameters at 1000 classes)
BIT_MODELS = {
    "R50x1": ((3, 4, 6, 3), 1, 25_549_352),
    "R50x2": ((3, 4, 6, 3), 2, 97_988_712),
    "R101x1": ((3, 4, 23, 3), 1, 44_541_480),
    "R152x1": ((3, 8, 36, 3), 1, 60_185_128),
    "R152x2": ((3, 8, 36, 3), 2, 236_335_208),
    "R200x3": ((3, 24, 36, 3), 3, 568_633_000),
}


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def official_resnet_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The ResNet part of an official (Linen layout) .npz, renamed and transposed for ResNetV1."""
    state = {}
    with np.load(path) as params:
        for key in params.files:
            if not key.startswith(("conv_root/", "gn_root/", "block")):
                continue
            value = params[key]
            module, leaf = key.rsplit("/", 1)
            if leaf == "kernel":
                value = value.transpose(3, 2, 0, 1)  # HWIO -> OIHW
            state[f"{module.replace('/', '.')}.{'weight' if leaf in ('kernel', 'scale') else 'bias'}"] = value
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


def test_resnet_v1_matches_official_case_d() -> None:
    model = ResNetV1((1, 1), width_factor=1.0).eval()
    model.load_state_dict(official_resnet_state_dict(DATA / "D_params.npz"), strict=True)
    io = np.load(DATA / "D_io.npz")
    x = torch.from_numpy(io["inputs"]).permute(0, 3, 1, 2)
    with torch.no_grad():
        got = model.forward_intermediates(x)
        out = model(x)
    for name in ("conv_root", "gn_root", "block1", "block2"):
        expected = torch.from_numpy(io[name]).permute(0, 3, 1, 2)
        torch.testing.assert_close(
            got[name], expected, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}"
        )
    assert torch.equal(out, got["block2"])
    assert model.out_channels == 512 and model.stride == 8 and out.shape[-1] == 64 // model.stride


@pytest.mark.parametrize(
    ("layers", "width", "channels", "stride"),
    [((), 1.0, 64, 4), ((3, 4, 9), 1.0, 1024, 16), ((1, 1), 0.5, 256, 8)],
)
def test_resnet_v1_shapes_and_official_init(layers, width, channels, stride) -> None:
    model = ResNetV1(layers, width_factor=width)
    out = model(torch.randn(1, 3, 64, 64))
    assert (model.out_channels, model.stride) == (channels, stride)
    assert out.shape == (1, channels, 64 // stride, 64 // stride)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.GroupNorm):
            assert torch.all(module.bias == 0)
            assert torch.all(module.weight == (0 if name.endswith("gn3") else 1)), name


def test_std_conv_formulas_and_same_padding() -> None:
    torch.manual_seed(0)
    conv = StdConv2d(3, 4, 3, stride=2, padding="same_tf")
    w = conv.weight.detach()
    flat = w.reshape(4, -1)
    expected = (flat - flat.mean(1, keepdim=True)) / (flat.std(1, correction=0, keepdim=True) + 1e-5)
    torch.testing.assert_close(conv.standardized_weight().reshape(4, -1), expected)
    bit = StdConv2d(3, 4, 3, eps=1e-8, eps_in_sqrt=True)
    bit.weight.data.copy_(w)
    expected = (flat - flat.mean(1, keepdim=True)) / (flat.var(1, correction=0, keepdim=True) + 1e-8).sqrt()
    torch.testing.assert_close(bit.standardized_weight().reshape(4, -1), expected)
    for size in (7, 8, 9):  # TF SAME: ceil(in / 2) outputs; odd padding puts the extra pixel after
        x = torch.randn(1, 3, size, size)
        total = max((-(-size // 2) - 1) * 2 + 3 - size, 0)
        padded = F.pad(x, (total // 2, total - total // 2) * 2)
        manual = F.conv2d(padded, conv.standardized_weight(), stride=2)
        torch.testing.assert_close(conv(x), manual)
        assert pad_same_tf(x, (3, 3), (2, 2)).shape[-1] == size + total
    with pytest.raises(ValueError, match="padding"):
        StdConv2d(3, 4, 3, padding="same")


@pytest.mark.parametrize("name", list(BIT_MODELS))
def test_resnet_v2_parameter_counts(name: str) -> None:
    timm_resnetv2 = pytest.importorskip("timm.models.resnetv2")
    from timm.layers import StdConv2d as TimmStdConv2d

    layers, width, expected = BIT_MODELS[name]
    with torch.device("meta"):
        model = ResNetV2(ResNetConfig(layers=layers, width_factor=width, num_classes=1000))
        # timm's resnetv2_*_bit settings, built directly: timm registers only some of these depth/width pairs
        reference = timm_resnetv2.ResNetV2(
            layers=list(layers),
            width_factor=width,
            num_classes=1000,
            stem_type="fixed",
            conv_layer=partial(TimmStdConv2d, eps=1e-8),
        )
    assert num_params(model) == expected
    assert num_params(reference) == expected


TIMM_TO_VITKIT = [
    (r"^stem\.conv\.", "conv_root."),
    (r"^stages\.(\d+)\.blocks\.(\d+)\.", lambda m: f"block{int(m[1]) + 1}.unit{int(m[2]) + 1}."),
    (r"\.norm(\d)\.", r".gn\1."),
    (r"\.downsample\.conv\.", ".conv_proj."),
    (r"^head\.fc\.", "head."),
]


def from_timm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        for pattern, repl in TIMM_TO_VITKIT:
            key = re.sub(pattern, repl, key)
        out[key] = value.flatten(1) if key == "head.weight" else value  # 1x1 conv head -> Linear
    return out


def timm_bit_and_vitkit() -> tuple[torch.nn.Module, ResNetV2]:
    """timm's R50x1 (BiT) with its norms and head moved off their init (1, 0, zero head), so mistakes show, and
    vitkit's R50x1 holding the same weights."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    reference = timm.create_model("resnetv2_50x1_bit", pretrained=False, num_classes=10).eval()
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if name.startswith("head."):
                p.normal_(0, 0.05)
            elif p.ndim == 1:  # GroupNorm scale and bias
                noise = torch.randn_like(p)
                p.copy_(1 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
    model = ResNetV2(ResNetConfig(layers=(3, 4, 6, 3), width_factor=1, num_classes=10)).eval()
    model.load_state_dict(from_timm(reference.state_dict()), strict=True)
    return reference, model


@pytest.mark.slow
def test_resnet_v2_matches_timm_bit() -> None:
    reference, model = timm_bit_and_vitkit()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected, got = reference(x), model(x)
        features, expected_features = model.forward_features(x), reference.forward_features(x)
    torch.testing.assert_close(features, expected_features, rtol=1e-4, atol=1e-4)
    assert expected.abs().max() > 0.1
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_resnet_v2_in_bf16_strays_from_float32_as_far_as_timm_bit() -> None:
    """A 50-layer BiT in bf16 (vitkit's inference path) moves its logits by several percent of the largest: the
    rounding of 50 layers, as timm's under autocast moves them as far on the same weights."""
    reference, model = timm_bit_and_vitkit()
    x = torch.randn(4, 3, 128, 128)
    with torch.inference_mode():
        exact = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            timm_bf16 = reference(x).float()
        with choose_precision("bf16", "cpu").inference(model) as bf16_model:
            ours = bf16_model(x)
    assert ours.dtype == torch.bfloat16  # it did run in bf16
    ours = ours.float()

    def error(logits: torch.Tensor) -> float:
        return float((logits - exact).abs().max() / exact.abs().max())

    assert error(ours) <= 1.5 * error(timm_bf16), (error(ours), error(timm_bf16))


def small_v2(num_classes: int = 5) -> ResNetV2:
    torch.manual_seed(0)
    model = ResNetV2(ResNetConfig(layers=(1, 1), width_factor=1, num_classes=num_classes))
    torch.nn.init.normal_(model.head.weight, std=0.1)  # the zero head would zero every other gradient
    return model


def test_resnet_v2_interface() -> None:
    model = small_v2()
    x = torch.randn(2, 3, 64, 64)
    features = model.forward_features(x)
    assert features.shape == (2, 512, 8, 8) and features.min() >= 0
    assert model.forward_head(features, pre_logits=True).shape == (2, 512)
    assert model(x).shape == (2, 5)
    model.reset_classifier(7)
    assert model.config.num_classes == 7 and torch.all(model(x) == 0)
    no_decay = model.no_weight_decay()
    assert "norm.weight" in no_decay and "block1.unit1.gn1.bias" in no_decay and "head.bias" in no_decay
    assert "head.weight" not in no_decay and "conv_root.weight" not in no_decay
    with pytest.raises(ValueError, match=r"expected input \[B, 3, H, W\], got \[2, 1, 64, 64\]"):
        model(torch.randn(2, 1, 64, 64))


def test_resnet_v2_grad_checkpointing_recomputes_stages_and_keeps_gradients() -> None:
    model = small_v2()
    stages = [module for name, module in model.named_children() if name.startswith("block")]
    assert len(stages) == 2
    assert_checkpointing_recomputes(model, torch.randn(2, 3, 64, 64), stages)

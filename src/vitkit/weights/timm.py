"""timm's VisionTransformer (plain, GAP, and the R50 hybrid `vit_*_r50_s*`), both ways.

vitkit's module names follow timm, so the table is mostly identity. The differences:

* timm keeps the position table as the bare parameter `pos_embed`; vitkit as `pos_embed.weight`.
* The hybrid: timm's ResNetV2(preact=False) inside `patch_embed.backbone` (`stem.conv/norm`,
  `stages.{s-1}.blocks.{u-1}.conv{k}/norm{k}`, `downsample.conv/norm`) is vitkit's `backbone` (vit_jax names).
  Its weight standardisation puts the epsilon inside the square root (1e-8) where vit_jax adds 1e-5 to the
  std; raw kernels would therefore give slightly different convs (~1e-4 relative, per channel). Kernels cross
  over re-standardised instead (`restandardize`): the target conv then applies exactly the source's kernel.
  timm's GroupNorm epsilon is 1e-5, vit_jax's 1e-6; models built by `to_timm` get 1e-6.
* GAP: timm's `global_pool='avg'` with `class_token=False, fc_norm=False` (final norm, then the mean over all
  tokens) is the official GAP; timm's default `fc_norm` (mean, then norm) is a different model and refused.
* Pre-logits: timm's VisionTransformer has no representation layer (timm drops it from the official in21k
  checkpoints). `to_timm` keeps it by making the head `Sequential(pre_logits=Linear, act=Tanh, fc=Linear)`,
  which reproduces the forward; such a state dict fits that model, not a stock `timm.create_model` one.

timm is imported only inside `from_timm` / `to_timm`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from vitkit.models.config import ViTConfig
from vitkit.models.registry import Model
from vitkit.models.resnet import HYBRID_GN_EPS, HYBRID_WS_EPS
from vitkit.weights.mapping import Rule, Table, Transform, linear
from vitkit.weights.vitkit_state import load_vitkit_state

TIMM_WS_EPS = 1e-8  # timm's StdConv2d / StdConv2dSame default for the ViT hybrids
TIMM_EPS = 1e-6  # timm's ViT LayerNorm
_PRE_LOGITS_KEY = "head.pre_logits.weight"


def restandardize(
    weight: torch.Tensor, source: tuple[float, bool], target: tuple[float, bool]
) -> torch.Tensor:
    """The raw kernel that a target weight-standardising conv turns into exactly what the source conv applies.

    `source` / `target` are (eps, eps_in_sqrt): timm divides by sqrt(var + eps), vit_jax by std + eps. Either
    leaves each output channel with a standard deviation s slightly below 1, which the other formula would
    undo; so the result is the unit-variance kernel scaled to the one magnitude at which the target formula
    yields s again. 1 - s comes from closed forms (no cancellation), the per-channel factors in float64.
    """
    var32, mean = torch.var_mean(weight.float(), dim=(1, 2, 3), correction=0, keepdim=True)
    var = var32.double()  # per-channel factors in float64, the element-wise part in float32
    std = var.sqrt()
    eps, in_sqrt = source
    if in_sqrt:  # s = std / sqrt(var + eps)
        s = std / (var + eps).sqrt()
        one_minus_s2 = eps / (var + eps)
        one_minus_s = one_minus_s2 / (1 + s)
    else:  # s = std / (std + eps)
        s = std / (std + eps)
        one_minus_s = eps / (std + eps)
        one_minus_s2 = one_minus_s * (1 + s)
    eps, in_sqrt = target
    scale = s * (eps / one_minus_s2).sqrt() if in_sqrt else eps * s / one_minus_s
    factor = torch.where(std > 0, scale / std.clamp_min(1e-300), 0.0)  # a constant channel stays zero
    return ((weight.float() - mean) * factor.float()).to(weight.dtype)


_VIT_JAX_WS = (HYBRID_WS_EPS, False)
STD_CONV = Transform(
    lambda ts, ctx: [restandardize(ts[0], (ctx.get("ws_eps", TIMM_WS_EPS), True), _VIT_JAX_WS)],
    lambda ts, ctx: [restandardize(ts[0], _VIT_JAX_WS, (TIMM_WS_EPS, True))],
)


def _table(pre_logits: bool) -> Table:
    block = "blocks.{i}."
    unit = "patch_embed.backbone.stages.{s-1}.blocks.{u-1}."
    same = [
        "patch_embed.proj",
        *(block + m for m in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")),
        "norm",
    ]
    return Table(
        "timm",
        [
            *(rule for name in same for rule in linear(name, name + ".")),
            Rule.of("cls_token", "cls_token"),
            Rule.of("pos_embed.weight", "pos_embed"),
            *linear("pre_logits.fc", "head.pre_logits."),
            *linear("head", "head.fc." if pre_logits else "head."),
            Rule.of("backbone.conv_root.weight", "patch_embed.backbone.stem.conv.weight", STD_CONV),
            *linear("backbone.gn_root", "patch_embed.backbone.stem.norm."),
            Rule.of("backbone.block{s}.unit{u}.conv{k}.weight", unit + "conv{k}.weight", STD_CONV),
            *linear("backbone.block{s}.unit{u}.gn{k}", unit + "norm{k}."),
            Rule.of("backbone.block{s}.unit{u}.conv_proj.weight", unit + "downsample.conv.weight", STD_CONV),
            *linear("backbone.block{s}.unit{u}.gn_proj", unit + "downsample.norm."),
        ],
    )


TABLES = {flag: _table(flag) for flag in (False, True)}


def load_timm_state(
    state: Mapping[str, torch.Tensor],
    source: str,
    *,
    hints: Mapping[str, Any] | None = None,
    ctx: Mapping[str, Any] | None = None,
    **options: Any,
) -> Model:
    """vitkit model from timm ViT state dict; `hints` fill in what tensors do not say (heads, GELU, eps)."""
    converted = TABLES[_PRE_LOGITS_KEY in state].to_vitkit(state, source, ctx)
    hints = {"activation": "gelu", "layer_norm_eps": TIMM_EPS, **(hints or {})}
    return load_vitkit_state(converted, source, hints=hints, **options)


def _activation(module: nn.Module, where: str) -> str:
    """vitkit's activation name for a timm/torch GELU module."""
    name = type(module).__name__
    if name == "GELUTanh" or (isinstance(module, nn.GELU) and module.approximate == "tanh"):
        return "gelu_tanh"
    if name == "GELU":
        return "gelu"
    raise ValueError(
        f"{where}: activation {name} has no vitkit equivalent (expected GELU or its tanh approximation)"
    )


def _check_timm_model(model: nn.Module) -> None:
    """Refuse timm options that change the computation without changing the parameter names."""
    where = f"timm {type(model).__name__}"
    problems = []
    pool = getattr(model, "global_pool", None)
    if pool not in ("token", "avg"):
        problems.append(
            f"global_pool={pool!r} (vitkit pools with the class token or the mean: 'token'/'avg')"
        )
    if pool == "avg" and model.cls_token is not None:
        problems.append("global_pool='avg' with a class token (the official GAP model has no class token)")
    if not isinstance(model.fc_norm, nn.Identity):
        problems.append(
            "fc_norm (normalising after pooling; the official GAP normalises before: fc_norm=False)"
        )
    if getattr(model, "num_reg_tokens", 0):
        problems.append(f"{model.num_reg_tokens} register tokens")
    if getattr(model, "no_embed_class", False) and model.cls_token is not None:
        problems.append("no_embed_class=True (the class token gets no position embedding)")
    if getattr(model, "pool_include_prefix", False):
        problems.append("pool_include_prefix=True")
    if model.pos_embed is None:
        problems.append("no position embedding")
    if problems:
        raise ValueError(f"{where} cannot be represented by vitkit: " + "; ".join(problems))


def from_timm(timm_model: nn.Module, *, keep_pre_logits: bool = False, **overrides: Any) -> Model:
    """A vitkit VisionTransformer computing what a timm VisionTransformer (plain, GAP, hybrid) computes."""
    # timm is optional (extras bench and test): only the conversions to and from timm import it.
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    if not isinstance(timm_model, TimmViT):
        raise ValueError(f"from_timm expects a timm VisionTransformer, got {type(timm_model).__name__}")
    _check_timm_model(timm_model)
    where = f"timm {type(timm_model).__name__}"
    first = timm_model.blocks[0]
    hints: dict[str, Any] = dict(
        num_heads=first.attn.num_heads,
        activation=_activation(first.mlp.act, where),
        layer_norm_eps=first.norm1.eps,
        img_size=tuple(timm_model.patch_embed.img_size),
    )
    backbone = getattr(timm_model.patch_embed, "backbone", None)
    convs = [
        m
        for m in (backbone.modules() if backbone is not None else ())
        if hasattr(m, "eps") and isinstance(m, nn.Conv2d)
    ]
    ctx = {"ws_eps": convs[0].eps if convs else TIMM_WS_EPS}
    state = {k: v.detach() for k, v in timm_model.state_dict().items()}
    return load_timm_state(state, where, hints=hints, ctx=ctx, keep_pre_logits=keep_pre_logits, **overrides)


def _timm_backbone(config: ViTConfig) -> nn.Module:
    """timm's hybrid backbone (ResNetV2, preact=False, SAME padding) with vit_jax's GroupNorm epsilon."""
    # timm is optional (extras bench and test): only the conversions to and from timm import it.
    from timm.layers import GroupNormAct, StdConv2dSame
    from timm.models.resnetv2 import ResNetV2

    if not config.resnet_layers:
        raise ValueError("to_timm: a hybrid with a stem-only ResNet (resnet_layers=()) is not supported")
    width = int(64 * config.resnet_width)
    return ResNetV2(
        layers=list(config.resnet_layers),
        channels=tuple(4 * width * 2**s for s in range(len(config.resnet_layers))),
        stem_chs=width,
        num_classes=0,
        global_pool="",
        in_chans=config.in_chans,
        preact=False,
        stem_type="same",
        conv_layer=partial(StdConv2dSame, eps=TIMM_WS_EPS),
        norm_layer=partial(GroupNormAct, num_groups=32, eps=HYBRID_GN_EPS),
    )


def to_timm(model: nn.Module) -> nn.Module:
    """The same network as a timm VisionTransformer (eval mode): weights loaded strictly, outputs equal."""
    # timm is optional (extras bench and test): only the conversions to and from timm import it.
    from timm.layers import HybridEmbed
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        raise ValueError(f"to_timm expects a vitkit VisionTransformer, got {type(model).__name__}")
    if config.pos_embed != "learned":
        raise ValueError(
            f"to_timm: timm's VisionTransformer has a learned 1-D position embedding; this model's is "
            f"{config.pos_embed!r}"
        )
    token = config.classifier == "token"
    kwargs: dict[str, Any] = dict(
        img_size=config.img_size,
        patch_size=config.patch_size,
        in_chans=config.in_chans,
        num_classes=0 if config.representation_size else config.num_classes,
        global_pool="token" if token else "avg",
        class_token=token,
        fc_norm=False,
        embed_dim=config.hidden_size,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_dim / config.hidden_size,
        qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=config.layer_norm_eps),
        act_layer=config.activation,
        proj_drop_rate=config.dropout,
        pos_drop_rate=config.dropout,
        attn_drop_rate=config.attention_dropout,
        drop_path_rate=config.drop_path,
        dynamic_img_size=config.dynamic_img_size,
        weight_init="skip",
    )
    if config.resnet_layers is not None:
        kwargs["embed_layer"] = partial(HybridEmbed, backbone=_timm_backbone(config))
    timm_model = TimmViT(**kwargs)
    if timm_model.blocks[0].mlp.fc1.out_features != config.mlp_dim:
        raise ValueError(
            f"to_timm: timm cannot build mlp_dim {config.mlp_dim} from mlp_ratio "
            f"{config.mlp_dim / config.hidden_size}"
        )
    if config.representation_size:
        head = [("pre_logits", nn.Linear(config.hidden_size, config.representation_size)), ("act", nn.Tanh())]
        if config.num_classes:
            head.append(("fc", nn.Linear(config.representation_size, config.num_classes)))
        timm_model.head = nn.Sequential(OrderedDict(head))
        timm_model.num_features = timm_model.head_hidden_size = config.representation_size
    converted = TABLES[bool(config.representation_size)].from_vitkit(model.state_dict(), "to_timm")
    timm_model.load_state_dict(converted.tensors, strict=True)
    return timm_model.eval()

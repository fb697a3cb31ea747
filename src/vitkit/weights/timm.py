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
* Later ViTs (DeiT III, CLIP, SigLIP, DINOv2 with and without registers, as timm builds them): register tokens,
  LayerScale, `no_embed_class`, `pre_norm` (and CLIP's bias-free patch embedding), QuickGELU, SwiGLUPacked MLPs,
  qkv without bias, `global_pool='map'` (AttentionPoolLatent with one latent) and `fc_norm` after 'avg' pooling
  map to the ViTConfig fields of the same parts; the pretrained config's mean and std travel as `image_mean` /
  `image_std`, and a DINOv2 architecture sets `probe_classifier='token_gap'` (its authors' linear evaluation).
  Options that change the computation with no vitkit counterpart (qk-norm, the norms inside attention or MLP,
  other pools) are refused with one line.
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
        "norm_pre",
        "fc_norm",
        *(f"attn_pool.{m}" for m in ("q", "kv", "proj", "norm", "mlp.fc1", "mlp.fc2")),
    ]
    return Table(
        "timm",
        [
            *(rule for name in same for rule in linear(name, name + ".")),
            *(Rule.of(name, name) for name in ("cls_token", "reg_token", "attn_pool.latent")),
            *(Rule.of(block + f"ls{k}.gamma", block + f"ls{k}.gamma") for k in (1, 2)),
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


def _activation(block: Any, where: str) -> str:
    """vitkit's activation name for the MLP of a timm Block: a GELU, its tanh form, QuickGELU, SwiGLUPacked."""
    mlp = block.mlp
    name = type(mlp.act).__name__
    if type(mlp).__name__ == "GluMlp":
        if isinstance(mlp.act, nn.SiLU) and not mlp.gate_last and isinstance(mlp.norm, nn.Identity):
            return "swiglu"
        raise ValueError(f"{where}: a gated MLP other than SwiGLUPacked (SiLU, gate first, no norm)")
    if not isinstance(getattr(mlp, "norm", nn.Identity()), nn.Identity):
        raise ValueError(f"{where}: a norm inside the MLP (scale_mlp_norm) has no vitkit equivalent")
    if name == "GELUTanh" or (isinstance(mlp.act, nn.GELU) and mlp.act.approximate == "tanh"):
        return "gelu_tanh"
    if name == "GELU":
        return "gelu"
    if name == "QuickGELU":
        return "quick_gelu"
    raise ValueError(
        f"{where}: activation {name} has no vitkit equivalent (expected GELU, its tanh approximation or QuickGELU)"
    )


def _pool_problems(model: Any) -> list[str]:
    """What of a timm model's pooling vitkit cannot compute: it pools with the class token, the mean of the
    patch tokens (without a class token), or one latent query over the patch tokens ('map')."""
    pool = getattr(model, "global_pool", None)
    problems = []
    if pool not in ("token", "avg", "map"):
        problems.append(f"global_pool={pool!r} (vitkit pools with 'token', 'avg' or 'map')")
    if pool in ("avg", "map") and model.cls_token is not None:
        problems.append(f"global_pool={pool!r} with a class token")
    if not isinstance(model.fc_norm, nn.Identity) and pool != "avg":
        problems.append(f"fc_norm (a norm after pooling) with global_pool={pool!r}")
    if getattr(model, "pool_include_prefix", False):
        problems.append("pool_include_prefix=True")
    pooler = getattr(model, "attn_pool", None)
    if pool == "map" and pooler is not None:
        if (
            type(pooler).__name__ != "AttentionPoolLatent"
            or pooler.latent_len != 1
            or pooler.pos_embed is not None
        ):
            problems.append(
                "an attention pool other than AttentionPoolLatent with one latent and no position"
            )
        elif pooler.mlp is None or not isinstance(pooler.q_norm, nn.Identity) or pooler.pool != "token":
            problems.append("an attention pool without its MLP, with qk-norm, or pooling several latents")
        elif pooler.num_heads != model.blocks[0].attn.num_heads or pooler.mlp.fc1.out_features != (
            model.blocks[0].mlp.fc2.in_features
        ):
            problems.append("an attention pool whose heads or MLP width differ from the blocks'")
    return problems


def _check_timm_model(model: Any) -> None:
    """Refuse timm options that change the computation without changing the parameter names."""
    where = f"timm {type(model).__name__}"
    problems = _pool_problems(model)
    if model.pos_embed is None:
        problems.append("no position embedding")
    first = model.blocks[0] if len(model.blocks) else None
    if first is not None:
        attn = first.attn
        if not all(
            isinstance(getattr(attn, n, nn.Identity()), nn.Identity) for n in ("q_norm", "k_norm", "norm")
        ):
            problems.append("qk-norm or a norm inside attention")
        if attn.proj.bias is None:
            problems.append("an attention output projection without bias")
    if problems:
        raise ValueError(f"{where} cannot be represented by vitkit: " + "; ".join(problems))


def pretrained_hints(pretrained_cfg: Mapping[str, Any] | None, architecture: str) -> dict[str, Any]:
    """What a timm pretrained config and architecture name say beyond the tensors: the normalisation the
    weights expect, and DINOv2's own way to read frozen features (the class token beside the patch mean)."""
    cfg = pretrained_cfg or {}
    hints: dict[str, Any] = {}
    for key, field in (("mean", "image_mean"), ("std", "image_std")):
        if cfg.get(key) is not None and tuple(cfg[key]) != (0.5,) * len(cfg[key]):
            hints[field] = tuple(float(v) for v in cfg[key])
    if "dinov2" in architecture:
        hints["probe_classifier"] = "token_gap"
    return hints


def from_timm(timm_model: nn.Module, *, keep_pre_logits: bool = False, **overrides: Any) -> Model:
    """A vitkit VisionTransformer computing what a timm VisionTransformer computes: the paper's (plain, GAP,
    hybrid) and the later families timm builds on the same class (DeiT III, CLIP, SigLIP, DINOv2)."""
    # timm is optional (extras bench and test): only the conversions to and from timm import it.
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    if not isinstance(timm_model, TimmViT):
        raise ValueError(f"from_timm expects a timm VisionTransformer, got {type(timm_model).__name__}")
    _check_timm_model(timm_model)
    where = f"timm {type(timm_model).__name__}"
    first = timm_model.blocks[0]
    pretrained_cfg = getattr(timm_model, "pretrained_cfg", None) or {}
    hints: dict[str, Any] = dict(
        num_heads=first.attn.num_heads,
        activation=_activation(first, where),
        layer_norm_eps=first.norm1.eps,
        img_size=tuple(timm_model.patch_embed.img_size),
        prefix_pos_embed=not timm_model.no_embed_class,
        **pretrained_hints(pretrained_cfg, str(pretrained_cfg.get("architecture", ""))),
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


def _swiglu_layer(mlp_dim: int) -> Any:
    """timm's SwiGLUPacked `mlp_dim` wide after gating, whatever width timm's mlp_ratio would round to."""
    from timm.layers import SwiGLUPacked

    def build(in_features: int, hidden_features: int, **kwargs: Any) -> nn.Module:
        return SwiGLUPacked(in_features, 2 * mlp_dim, **kwargs)

    return build


def to_timm(model: nn.Module) -> nn.Module:
    """The same network as a timm VisionTransformer (eval mode): weights loaded strictly, outputs equal."""
    # timm is optional (extras bench and test): only the conversions to and from timm import it.
    from timm.layers import HybridEmbed
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        raise ValueError(f"to_timm expects a vitkit VisionTransformer, got {type(model).__name__}")
    problems = []
    if config.pos_embed != "learned":
        problems.append(
            f"timm's VisionTransformer has a learned 1-D position embedding, not {config.pos_embed!r}"
        )
    if config.classifier == "token_gap":
        problems.append("classifier 'token_gap' (timm pools the class token or the mean, not both)")
    if config.classifier == "map" and config.activation == "swiglu":
        problems.append("a 'map' head with SwiGLU (timm's attention pool has a plain MLP)")
    if problems:
        raise ValueError("to_timm: cannot represent this model in timm: " + "; ".join(problems))
    swiglu = config.activation == "swiglu"
    kwargs: dict[str, Any] = dict(
        img_size=config.img_size,
        patch_size=config.patch_size,
        in_chans=config.in_chans,
        num_classes=0 if config.representation_size else config.num_classes,
        global_pool={"token": "token", "gap": "avg", "map": "map"}[config.classifier],
        class_token=config.has_class_token,
        reg_tokens=config.num_reg_tokens,
        no_embed_class=not config.prefix_pos_embed,
        pre_norm=config.pre_norm,
        fc_norm=config.fc_norm,
        init_values=config.layer_scale,
        embed_dim=config.hidden_size,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_dim / config.hidden_size,
        qkv_bias=config.qkv_bias,
        norm_layer=partial(nn.LayerNorm, eps=config.layer_norm_eps),
        act_layer=nn.SiLU if swiglu else config.activation,
        proj_drop_rate=config.dropout,
        pos_drop_rate=config.dropout,
        attn_drop_rate=config.attention_dropout,
        drop_path_rate=config.drop_path,
        dynamic_img_size=config.dynamic_img_size,
        weight_init="skip",
    )
    if swiglu:
        kwargs["mlp_layer"] = _swiglu_layer(config.mlp_dim)
    if config.resnet_layers is not None:
        kwargs["embed_layer"] = partial(HybridEmbed, backbone=_timm_backbone(config))
    timm_model = TimmViT(**kwargs)
    width = timm_model.blocks[0].mlp.fc2.in_features if config.depth else config.mlp_dim
    if width != config.mlp_dim:
        raise ValueError(
            f"to_timm: timm cannot build mlp_dim {config.mlp_dim} from mlp_ratio "
            f"{config.mlp_dim / config.hidden_size}"
        )
    proj = timm_model.patch_embed.proj
    if (proj.bias is not None) != config.patch_bias:  # timm ties the patch bias to pre_norm (off in CLIP)
        timm_model.patch_embed.proj = nn.Conv2d(
            proj.in_channels, proj.out_channels, proj.kernel_size, proj.stride, bias=config.patch_bias
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

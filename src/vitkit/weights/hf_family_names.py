"""The state-dict names of transformers' DINOv2, CLIP and SigLIP vision towers against vitkit's: one rule table
per layout (`hf_families` says what each part is), and the 4.x names (`attention.attention.query`,
`mlp.weights_in`, the `vision_model.` prefix of CLIPVisionModel and SiglipVisionModel) renamed to 5.x first, as
transformers itself does."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from vitkit.weights.mapping import SPLIT_QKV, Rule, Table, Transform, linear

_V4_NAMES = (  # DINOv2's 4.x attention names -> 5.x
    ("attention.attention.query", "attention.q_proj"),
    ("attention.attention.key", "attention.k_proj"),
    ("attention.attention.value", "attention.v_proj"),
    ("attention.output.dense", "attention.o_proj"),
    ("mlp.weights_out", "mlp.down_proj"),
)
LEGACY_PREFIX = "vision_model."  # 4.x CLIPVisionModel / SiglipVisionModel, and 5.x's ...WithProjection
PROJECTION = "visual_projection.weight"


def _transform(
    to_vitkit: Callable[..., list[torch.Tensor]], to_foreign: Callable[..., list[torch.Tensor]]
) -> Transform:
    """A Transform whose functions take the tensors of one side as positional arguments."""
    return Transform(lambda ts, ctx: to_vitkit(*ts), lambda ts, ctx: to_foreign(*ts))


# The class token's position row added into the class token (registers: no rows) <-> a zero row.
FOLD_CLASS_POSITION = _transform(
    lambda cls, pos: [cls + pos[:, :1], pos[:, 1:]],
    lambda cls, pos: [cls, torch.cat([torch.zeros_like(pos[:, :1]), pos], dim=1)],
)
STACK_GATE = _transform(lambda gate, up: [torch.cat([gate, up])], lambda fc1: list(fc1.chunk(2)))
CLASS_VECTOR = _transform(lambda cls: [cls.reshape(1, 1, -1)], lambda cls: [cls.reshape(-1)])
BATCH_OF_ONE = _transform(lambda table: [table[None]], lambda table: [table[0]])  # nn.Embedding rows
SPLIT_Q_KV = _transform(
    lambda packed: list(packed.tensor_split([packed.shape[0] // 3])), lambda q, kv: [torch.cat([q, kv])]
)
NO_BIAS = _transform(
    lambda weight: [weight, weight.new_zeros(weight.shape[0])], lambda weight, bias: [weight]
)


def _attention(attn: str, out: str) -> list[Rule]:
    """Separate q, k, v projections (`{attn}q_proj`, ...) and the output projection `{attn}{out}`."""
    qkv = [attn + f"{n}_proj." for n in "qkv"]
    return [
        *(Rule.of(f"blocks.{{i}}.attn.qkv.{p}", [n + p for n in qkv], SPLIT_QKV) for p in ("weight", "bias")),
        *linear("blocks.{i}.attn.proj", f"{attn}{out}."),
    ]


def _dinov2_table(folded: bool, swiglu: bool) -> Table:
    layer = "encoder.layer.{i}."
    if swiglu:
        gate_up = [layer + f"mlp.{n}_proj." for n in ("gate", "up")]
        mlp = [
            *(
                Rule.of(f"blocks.{{i}}.mlp.fc1.{p}", [n + p for n in gate_up], STACK_GATE)
                for p in ("weight", "bias")
            ),
            *linear("blocks.{i}.mlp.fc2", layer + "mlp.down_proj."),
        ]
    else:
        mlp = [
            *linear("blocks.{i}.mlp.fc1", layer + "mlp.fc1."),
            *linear("blocks.{i}.mlp.fc2", layer + "mlp.fc2."),
        ]
    tokens, position = "embeddings.cls_token", "embeddings.position_embeddings"
    prefix = (
        [Rule.of(("cls_token", "pos_embed.weight"), (tokens, position), FOLD_CLASS_POSITION)]
        if folded
        else [Rule.of("cls_token", tokens), Rule.of("pos_embed.weight", position)]
    )
    return Table(
        "transformers",
        [
            *linear("patch_embed.proj", "embeddings.patch_embeddings.projection."),
            *prefix,
            Rule.of("reg_token", "embeddings.register_tokens"),
            *linear("blocks.{i}.norm1", layer + "norm1."),
            *_attention(layer + "attention.", "o_proj"),
            Rule.of("blocks.{i}.ls1.gamma", layer + "layer_scale1.lambda1"),
            *linear("blocks.{i}.norm2", layer + "norm2."),
            *mlp,
            Rule.of("blocks.{i}.ls2.gamma", layer + "layer_scale2.lambda1"),
            *linear("norm", "layernorm."),
        ],
    )


def _clip_siglip_table() -> Table:
    """CLIP and SigLIP share the encoder's names; each has parts the other lacks (rules fire on keys present)."""
    layer = "encoder.layers.{i}."
    return Table(
        "transformers",
        [
            *linear("patch_embed.proj", "embeddings.patch_embedding."),  # CLIP's has no bias
            Rule.of("cls_token", "embeddings.class_embedding", CLASS_VECTOR),
            Rule.of("pos_embed.weight", "embeddings.position_embedding.weight", BATCH_OF_ONE),
            *linear("norm_pre", "pre_layrnorm."),
            *linear("blocks.{i}.norm1", layer + "layer_norm1."),
            *_attention(layer + "self_attn.", "out_proj"),
            *linear("blocks.{i}.norm2", layer + "layer_norm2."),
            *linear("blocks.{i}.mlp.fc1", layer + "mlp.fc1."),
            *linear("blocks.{i}.mlp.fc2", layer + "mlp.fc2."),
            *linear("norm", "post_layernorm."),
            Rule.of(("head.weight", "head.bias"), PROJECTION, NO_BIAS),
            Rule.of("attn_pool.latent", "head.probe"),
            *(
                Rule.of((f"attn_pool.q.{p}", f"attn_pool.kv.{p}"), f"head.attention.in_proj_{p}", SPLIT_Q_KV)
                for p in ("weight", "bias")
            ),
            *linear("attn_pool.proj", "head.attention.out_proj."),
            *linear("attn_pool.norm", "head.layernorm."),
            *linear("attn_pool.mlp.fc1", "head.mlp.fc1."),
            *linear("attn_pool.mlp.fc2", "head.mlp.fc2."),
        ],
    )


DINOV2_TABLES = {
    (folded, swiglu): _dinov2_table(folded, swiglu) for folded in (False, True) for swiglu in (False, True)
}
CLIP_SIGLIP_TABLE = _clip_siglip_table()


def modern_family_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers 4.x names -> 5.x: DINOv2's attention and SwiGLU names, the `vision_model.` prefix of CLIP and
    SigLIP; DINOv2's mask token and an empty register table dropped."""
    out = {}
    for key, value in state.items():
        key = key.removeprefix(LEGACY_PREFIX)
        if key == "embeddings.mask_token" or (key == "embeddings.register_tokens" and not value.shape[1]):
            continue
        for old, new in _V4_NAMES:
            key = key.replace(old, new)
        if key.endswith(("mlp.weights_in.weight", "mlp.weights_in.bias")):
            stem, kind = key.rsplit(".weights_in.", 1)
            gate, up = value.chunk(2)
            out[f"{stem}.gate_proj.{kind}"], out[f"{stem}.up_proj.{kind}"] = gate, up
            continue
        out[key] = value
    return out


def family_of_state(state: Mapping[str, torch.Tensor]) -> str | None:
    """'dinov2', 'clip' or 'siglip' from a state dict's (modern) key names; None for transformers' ViT."""
    keys = set(state)
    if "embeddings.class_embedding" in keys:
        return "clip"
    if "embeddings.patch_embedding.weight" in keys:
        return "siglip"
    if "embeddings.register_tokens" in keys or any(".layer_scale1." in k for k in keys):
        return "dinov2"
    return None

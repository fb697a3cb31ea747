"""transformers' ViT (`ViTModel`, `ViTForImageClassification`), both ways.

What transformers can and cannot hold:

* The class-token classifier only: `ViTForImageClassification` reads `last_hidden_state[:, 0]` (after the
  final LayerNorm) and has no pooling option, so a GAP model is refused.
* No hybrid: transformers v5 has no R50+ViT model (ViTHybrid was removed), so hybrids are refused.
* Pre-logits: `ViTModel`'s pooler is exactly the representation layer (Dense + tanh on the normalised class
  token). A vitkit model with pre-logits and no head becomes a `ViTModel` whose `pooler_output` is the vitkit
  output; with pre-logits *and* a head there is no transformers model that applies both, so it is refused
  (fine-tune with `num_classes=K`, which drops the pre-logits as the paper does, or use `num_classes=0`).
* Class names: `model.class_names` travel as transformers' `id2label` / `label2id`, and come back unless they are
  transformers' placeholders `LABEL_0`, `LABEL_1`, ...
* LayerNorm epsilon (transformers' default 1e-12, the official 1e-6) and GELU flavour travel in the config:
  `layer_norm_eps`, and `hidden_act` 'gelu' (erf) or 'gelu_pytorch_tanh'.

* Today's families: transformers' DINOv2, CLIP and SigLIP vision towers go both ways through `hf_families`;
  `from_hf` / `to_hf` / `load_hf_state` dispatch there by class, by the model's parts, or by key names.

State dicts with the transformers 4.x names (`encoder.layer.N.attention.attention.query`, ...) are renamed to
the 5.x names first, as transformers itself does. transformers is imported only inside `from_hf` / `to_hf`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from vitkit.models.config import ViTConfig, to_pair
from vitkit.models.registry import Model
from vitkit.weights.hf_families import (
    CLASSES,
    FROM_HF_ACT,
    TO_HF_ACT,
    from_hf_family,
    hf_class_for,
    load_family_state,
    to_hf_family,
)
from vitkit.weights.hf_family_names import family_of_state, modern_family_names
from vitkit.weights.mapping import SPLIT_QKV, Rule, Table, linear
from vitkit.weights.vitkit_state import load_vitkit_state

HF_EPS = 1e-12  # transformers' ViTConfig default
# transformers 4.x -> 5.x names inside the encoder, in the order transformers applies them
_V4_NAMES = (
    ("encoder.layer.", "layers."),
    ("attention.attention.query", "attention.q_proj"),
    ("attention.attention.key", "attention.k_proj"),
    ("attention.attention.value", "attention.v_proj"),
    ("attention.output.dense", "attention.o_proj"),
    ("intermediate.dense", "mlp.fc1"),
    ("output.dense", "mlp.fc2"),
)
_IGNORED = ("embeddings.mask_token",)  # masked-image-modelling input, unused by the classifier
CLASSIFIER_PREFIX = "vit."


def _table(prefix: str) -> Table:
    layer = prefix + "layers.{i}."
    attn = layer + "attention."
    return Table(
        "transformers",
        [
            *linear("patch_embed.proj", prefix + "embeddings.patch_embeddings.projection."),
            Rule.of("cls_token", prefix + "embeddings.cls_token"),
            Rule.of("pos_embed.weight", prefix + "embeddings.position_embeddings"),
            *linear("blocks.{i}.norm1", layer + "layernorm_before."),
            Rule.of("blocks.{i}.attn.qkv.weight", [attn + f"{n}_proj.weight" for n in "qkv"], SPLIT_QKV),
            Rule.of("blocks.{i}.attn.qkv.bias", [attn + f"{n}_proj.bias" for n in "qkv"], SPLIT_QKV),
            *linear("blocks.{i}.attn.proj", attn + "o_proj."),
            *linear("blocks.{i}.norm2", layer + "layernorm_after."),
            *linear("blocks.{i}.mlp.fc1", layer + "mlp.fc1."),
            *linear("blocks.{i}.mlp.fc2", layer + "mlp.fc2."),
            *linear("norm", prefix + "layernorm."),
            *linear("pre_logits.fc", prefix + "pooler.dense."),
            *linear("head", "classifier."),
        ],
    )


TABLES = {prefix: _table(prefix) for prefix in ("", CLASSIFIER_PREFIX)}


def modern_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers 4.x key names -> 5.x (5.x names pass unchanged); mask tokens dropped."""
    out = {}
    for key, value in state.items():
        if key.endswith(_IGNORED):
            continue
        if ".encoder.layer." in f".{key}":
            for old, new in _V4_NAMES:
                key = key.replace(old, new)
        out[key] = value
    return out


def hints_from_config(config: Any, source: str) -> dict[str, Any]:
    """Facts of a transformers ViTConfig (object or config.json dict) that the tensors do not carry."""
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    act = get("hidden_act", "gelu")
    if act not in FROM_HF_ACT:
        raise ValueError(
            f"{source}: hidden_act {act!r} has no vitkit equivalent (expected one of {sorted(FROM_HF_ACT)})"
        )
    if not get("qkv_bias", True):
        raise ValueError(f"{source}: qkv_bias=False; the ViT of the paper has biases on q, k and v")
    if get("pooler_act", "tanh") != "tanh":
        raise ValueError(f"{source}: pooler_act {get('pooler_act')!r}; the pre-logits layer is Dense + tanh")
    image = get("image_size", 224)
    return dict(
        num_heads=get("num_attention_heads"),
        activation=FROM_HF_ACT[act],
        layer_norm_eps=get("layer_norm_eps", HF_EPS),
        img_size=image,
    )


def class_names_from_config(config: Any, source: str) -> list[str] | None:
    """The class names of a transformers config's `id2label` (object or dict), None when they are only the
    placeholders LABEL_i transformers fills in (or are absent)."""
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    id2label = get("id2label") or {}
    try:
        labels = {int(i): str(name) for i, name in id2label.items()}
    except (TypeError, ValueError, AttributeError):
        raise ValueError(f"{source}: id2label must map class indices to names, got {id2label!r}") from None
    if sorted(labels) != list(range(len(labels))):
        raise ValueError(
            f"{source}: id2label must name classes 0..{len(labels) - 1}, got indices {sorted(labels)}"
        )
    names = [labels[i] for i in range(len(labels))]
    if not names or names == [f"LABEL_{i}" for i in range(len(names))]:
        return None
    return names


def load_hf_state(
    state: Mapping[str, torch.Tensor],
    source: str,
    *,
    hints: Mapping[str, Any] | None = None,
    **options: Any,
) -> Model:
    """A vitkit model from a transformers ViT state dict (ViTModel / ViTForImageClassification, 4.x / 5.x), or
    a DINOv2 / CLIP / SigLIP vision tower's (with transformers' config defaults: hints say what differs)."""
    if family_of_state(modern_family_names(state)) is not None:
        return load_family_state(state, source, hints=hints, **options)
    state = modern_names(state)
    prefix = CLASSIFIER_PREFIX if any(k.startswith(CLASSIFIER_PREFIX) for k in state) else ""
    converted = TABLES[prefix].to_vitkit(state, source)
    hints = {"activation": "gelu", "layer_norm_eps": HF_EPS, **{k: v for k, v in (hints or {}).items() if v}}
    return load_vitkit_state(converted, source, hints=hints, **options)


def from_hf(hf_model: nn.Module, *, keep_pre_logits: bool = False, **overrides: Any) -> Model:
    """A vitkit VisionTransformer computing what a transformers ViTModel / ViTForImageClassification computes,
    or a DINOv2 / CLIP / SigLIP vision tower (`hf_families`).

    ViTModel gives a head-less vitkit model whose output is `pooler_output` (with a pooler: the pre-logits
    layer) or the normalised class token (without); ViTForImageClassification gives the classifier. A vision
    tower's `pooler_output` is the vitkit output with `pre_logits=True` (CLIPVisionModelWithProjection's
    `image_embeds` the logits).
    """
    name = type(hf_model).__name__
    if name in CLASSES:
        return from_hf_family(hf_model, keep_pre_logits=keep_pre_logits, **overrides)
    if name not in ("ViTModel", "ViTForImageClassification"):
        raise ValueError(
            f"from_hf expects a transformers ViTModel, ViTForImageClassification or one of {list(CLASSES)}, "
            f"got {name}"
        )
    where = f"transformers {name}"
    hints = hints_from_config(hf_model.config, where)
    state = {k: v.detach() for k, v in hf_model.state_dict().items()}
    model = load_hf_state(state, where, hints=hints, keep_pre_logits=keep_pre_logits, **overrides)
    names = class_names_from_config(hf_model.config, where)
    if names is not None and len(names) == model.config.num_classes:  # a new --num-classes head: names gone
        model.class_names = names
    return model


def to_hf(model: nn.Module) -> Any:
    """The same network in transformers (eval mode): ViTForImageClassification, or ViTModel when head-less; a
    model with a family's parts as that family's vision tower (`hf_families.hf_class_for`)."""
    # transformers is optional (extras bench and test): only the conversions to and from it import it.
    from transformers import ViTConfig as HFConfig
    from transformers import ViTForImageClassification, ViTModel

    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        raise ValueError(f"to_hf expects a vitkit VisionTransformer, got {type(model).__name__}")
    family_class = hf_class_for(config)
    if family_class is not None:
        return to_hf_family(model, config, family_class)
    problems = [
        f"{part} (transformers' ViT has none)"
        for part, present in (
            ("register tokens", config.num_reg_tokens),
            ("position rows for the patches only", not config.prefix_pos_embed),
            ("a patch embedding without bias", not config.patch_bias),
            ("q, k, v without bias", not config.qkv_bias),
            (f"activation {config.activation!r}", config.activation not in TO_HF_ACT),
        )
        if present
    ]
    if config.classifier != "token":
        problems.append(
            f"classifier {config.classifier!r}: transformers' ViT always classifies from the class token"
        )
    if config.resnet_layers is not None:
        problems.append("a ResNet hybrid: transformers 5 has no hybrid ViT (ViTHybrid was removed)")
    if config.pos_embed != "learned":
        problems.append(f"pos_embed {config.pos_embed!r}: transformers' ViT has a learned 1-D table")
    if config.representation_size and config.num_classes:
        problems.append(
            "pre-logits and a head together: ViTForImageClassification skips the pooler; use "
            "num_classes=K (drops pre-logits, §3.2) or num_classes=0 (a ViTModel with the pooler)"
        )
    if problems:
        raise ValueError("to_hf: cannot represent this model in transformers: " + "; ".join(problems))
    hf_config = HFConfig(
        hidden_size=config.hidden_size,
        num_hidden_layers=config.depth,
        num_attention_heads=config.num_heads,
        intermediate_size=config.mlp_dim,
        hidden_act=TO_HF_ACT[config.activation],
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        layer_norm_eps=config.layer_norm_eps,
        image_size=list(to_pair(config.img_size)),
        patch_size=list(to_pair(config.patch_size)),
        num_channels=config.in_chans,
        qkv_bias=True,
        pooler_output_size=config.representation_size,
        pooler_act="tanh",
        num_labels=max(config.num_classes, 1),
    )
    names = getattr(model, "class_names", None)
    if names is not None and config.num_classes:
        hf_config.id2label = dict(enumerate(names))
        hf_config.label2id = {name: i for i, name in enumerate(names)}
    if config.num_classes:
        hf_model, prefix = ViTForImageClassification(hf_config), CLASSIFIER_PREFIX
    else:
        hf_model, prefix = ViTModel(hf_config, add_pooling_layer=bool(config.representation_size)), ""
    converted = TABLES[prefix].from_vitkit(model.state_dict(), "to_hf")
    hf_model.load_state_dict(converted.tensors, strict=True)
    return hf_model.eval()

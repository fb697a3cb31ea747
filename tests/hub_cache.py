"""A Hugging Face Hub cache laid out as huggingface_hub leaves it after a download, holding timm models: what the
tests of `hf-hub:` ids and Hub checkpoint names read offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_snapshot(cache: Path, repo_id: str, files: dict[str, bytes]) -> None:
    """The layout huggingface_hub leaves after a download: models--<org>--<name>/snapshots/<rev>/, refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "snapshots" / REVISION).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    for name, data in files.items():
        (repo / "snapshots" / REVISION / name).write_bytes(data)


def timm_upload(cache: Path, repo_id: str, timm_model: torch.nn.Module, **model_args: Any) -> None:
    """A timm model as timm's push_to_hf_hub uploads it: model.safetensors and config.json (architecture, heads,
    `model_args` when they differ from the registered model's, pretrained_cfg with its input size, mean, std)."""
    cfg = dict(timm_model.pretrained_cfg)
    cfg["input_size"] = [3, *timm_model.patch_embed.img_size]
    config = {
        "architecture": cfg["architecture"],
        "num_classes": timm_model.num_classes,
        "num_features": timm_model.num_features,
        "global_pool": timm_model.global_pool,
        "model_args": model_args,
        "pretrained_cfg": {k: v for k, v in cfg.items() if k not in ("architecture", "url", "hf_hub_id")},
    }
    state = {k: v.contiguous() for k, v in timm_model.state_dict().items()}
    files = {"model.safetensors": save(state), "config.json": json.dumps(config, default=str).encode()}
    hub_snapshot(cache, repo_id, files)

"""Published ViT checkpoints by name, any http(s) URL, and Hugging Face Hub ids (`hf-hub:timm/<name>`).

The paper's names resolve to the files of Google's public bucket (https://storage.googleapis.com/vit_models,
the paper's release and the AugReg release of "How to train your ViT?", Steiner et al. 2021), the same file
names timm and vit_jax use. The later families' names (DINOv2, CLIP, SigLIP, SigLIP 2, DeiT III) resolve to
timm's uploads on the Hugging Face Hub, read through huggingface_hub's cache; their timm config.json says the
architecture (its registered vitkit model: activation, LayerScale, position rows, the pooling of frozen
features) and the normalisation the weights were trained with. $VITKIT_WEIGHTS_BASE_URL replaces the bucket's
address, so an organisation's mirror holding the same relative paths serves the same names; the cache path
stays the one of the original URL, whoever serves it.

Each name records the model it holds (a registered vitkit variant), its resolution and classes; a loaded file
that describes another model is refused (a mirror serving the wrong file, a damaged download that still
parses). The official .npz files load with the tanh GELU and epsilon 1e-6 of the JAX models
(vitkit.weights.official).
"""

from __future__ import annotations

import fnmatch
import json
import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitkit.models.config import ViTConfig
from vitkit.models.registry import list_models, model_config
from vitkit.weights.cached_files import cache_path, without_credentials
from vitkit.weights.download import download_timeout, offline
from vitkit.weights.timm import pretrained_hints

OFFICIAL_BASE_URL = "https://storage.googleapis.com/vit_models"
BASE_URL_ENV = "VITKIT_WEIGHTS_BASE_URL"
HF_HUB_PREFIX = "hf-hub:"
I21K, I1K = "ImageNet-21k", "ImageNet-1k"
I21K_CLASSES, I1K_CLASSES = 21843, 1000
# What a name's file must agree with: the architecture of its registered model.
_PROXY_ENVS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
ARCHITECTURE_FIELDS = ("hidden_size", "depth", "num_heads", "mlp_dim", "patch_size", "resnet_layers")


@dataclass(frozen=True)
class Pretrained:
    """One published checkpoint: `file` is its path under the release's base URL."""

    name: str
    model: str  # the registered vitkit variant it holds
    file: str
    release: str  # 'original' (the paper's) or 'augreg' (Steiner et al. 2021)
    pretraining: str
    fine_tuning: str | None
    img_size: int
    num_classes: int
    licence: str = "apache-2.0"
    hub_id: str | None = None  # 'timm/<name>.<tag>' on the Hugging Face Hub; None: a file of Google's bucket

    @property
    def source(self) -> str:
        """Where the weights come from: `hf-hub:<id>`, or the file's URL in Google's bucket."""
        return f"{HF_HUB_PREFIX}{self.hub_id}" if self.hub_id else self.official_url

    @property
    def official_url(self) -> str:
        return f"{OFFICIAL_BASE_URL}/{urllib.parse.quote(self.file)}"

    @property
    def url(self) -> str:
        """The file's URL at $VITKIT_WEIGHTS_BASE_URL when set, else in Google's bucket."""
        return f"{base_url()}/{urllib.parse.quote(self.file)}"

    @property
    def cache_path(self) -> Path:
        return cache_path(self.official_url)

    @property
    def description(self) -> str:
        tuned = f", fine-tuned on {self.fine_tuning}" if self.fine_tuning else ""
        return f"{self.model} pre-trained on {self.pretraining}{tuned} at {self.img_size} px ({self.release})"


def base_url() -> str:
    """$VITKIT_WEIGHTS_BASE_URL (a mirror of the bucket's layout), else Google's bucket."""
    return os.environ.get(BASE_URL_ENV, "").rstrip("/") or OFFICIAL_BASE_URL


def _entry(name: str, model: str, file: str, release: str, fine_tuned_at: int | None) -> Pretrained:
    """ImageNet-21k pre-training at 224 px; `fine_tuned_at`: the resolution of the ImageNet-1k fine-tuning."""
    return Pretrained(
        name=name,
        model=model,
        file=file,
        release=release,
        pretraining=I21K,
        fine_tuning=I1K if fine_tuned_at else None,
        img_size=fine_tuned_at or 224,
        num_classes=I1K_CLASSES if fine_tuned_at else I21K_CLASSES,
    )


# The paper's release: ImageNet-21k pre-training; ImageNet-1k fine-tunings at 384 (and at 224 for B/16, L/16).
_ORIGINAL = {
    "ViT-B/16": ("ViT-B_16", (384, 224)),
    "ViT-B/32": ("ViT-B_32", (384,)),
    "ViT-L/16": ("ViT-L_16", (384, 224)),
    "ViT-L/32": ("ViT-L_32", (384,)),
    "ViT-H/14": ("ViT-H_14", ()),
    "R50+ViT-B/16": ("R50+ViT-B_16", (384,)),
}


def _original() -> list[Pretrained]:
    entries = []
    for model, (file, resolutions) in _ORIGINAL.items():
        entries.append(_entry(f"{model}-i21k", model, f"imagenet21k/{file}.npz", "original", None))
        for res in resolutions:
            suffix = "-224" if res == 224 else ""
            tuned = f"imagenet21k+imagenet2012/{file}{suffix}.npz"
            entries.append(_entry(f"{model}-i21k-in1k-{res}", model, tuned, "original", res))
    return entries


# AugReg: per model, the pre-training run the AugReg paper recommends (its hyper-parameters are in the file name),
# and its ImageNet-1k fine-tunings at 224 and 384 with their learning rate (B/32 at 384: another pre-training run).
_AUGREG_RUN = {
    "ViT-Ti/16": ("Ti_16", "aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-S/32": ("S_32", "aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-S/16": ("S_16", "aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-B/32": ("B_32", "aug_medium1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "ViT-B/16": ("B_16", "aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "ViT-L/16": ("L_16", "aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01"),
}
_AUGREG_B32_384 = "aug_light1-wd_0.1-do_0.0-sd_0.0"


def _augreg() -> list[Pretrained]:
    entries = []
    for model, (size, run, lr) in _AUGREG_RUN.items():
        pretraining = f"augreg/{size}-i21k-300ep-lr_0.001-{run}"
        entries.append(_entry(f"{model}-augreg-i21k", model, f"{pretraining}.npz", "augreg", None))
        for res in (224, 384):
            source = pretraining
            if model == "ViT-B/32" and res == 384:
                source = f"augreg/{size}-i21k-300ep-lr_0.001-{_AUGREG_B32_384}"
            tuned = f"{source}--imagenet2012-steps_20k-lr_{lr}-res_{res}.npz"
            entries.append(_entry(f"{model}-augreg-i21k-in1k-{res}", model, tuned, "augreg", res))
    return entries


def _hub(
    name: str,
    model: str,
    hub_id: str,
    release: str,
    pretraining: str,
    img_size: int,
    num_classes: int,
    **more: Any,
) -> Pretrained:
    """A checkpoint of a later family, as timm publishes it on the Hugging Face Hub."""
    return Pretrained(
        name, model, hub_id, release, pretraining, more.pop("fine_tuning", None), img_size, num_classes,
        hub_id=hub_id, **more,
    )  # fmt: skip


def _families() -> list[Pretrained]:
    """DINOv2 (Oquab et al. 2023; with registers, Darcet et al. 2024), OpenAI's CLIP image towers (QuickGELU,
    ending in the projection into the joint embedding), SigLIP and SigLIP 2 (WebLI), DeiT III (ImageNet-21k,
    fine-tuned on ImageNet-1k): the licences of their releases, the resolution they were trained at."""
    entries = []
    for size, timm_size in (("S", "small"), ("B", "base"), ("L", "large")):
        for suffix in ("", "-reg4"):
            hub_id = f"timm/vit_{timm_size}_patch14{suffix.replace('-', '_')}_dinov2.lvd142m"
            model = f"DINOv2-{size}/14{suffix}"
            entries.append(_hub(f"{model}-lvd142m", model, hub_id, "dinov2", "LVD-142M", 518, 0))
    for size, patch, timm_size, projection in (
        ("B", 16, "base", 512),
        ("B", 32, "base", 512),
        ("L", 14, "large", 768),
    ):
        hub_id = f"timm/vit_{timm_size}_patch{patch}_clip_224.openai"
        model = (
            f"CLIP-{size}/{patch}-quickgelu"  # OpenAI trained with QuickGELU (timm's note on these weights)
        )
        entries.append(_hub(f"CLIP-{size}/{patch}-openai", model, hub_id, "openai-clip", "WIT-400M", 224,
                            projection, licence="mit"))  # fmt: skip
    for family, tag in (("SigLIP", "webli"), ("SigLIP2", "v2_webli")):
        hub_id = f"timm/vit_base_patch16_siglip_224.{tag}"
        entries.append(
            _hub(f"{family}-B/16-webli", f"{family}-B/16", hub_id, family.lower(), "WebLI", 224, 0)
        )
    for size, timm_size in (("S", "small"), ("B", "base"), ("L", "large")):
        hub_id = f"timm/deit3_{timm_size}_patch16_224.fb_in22k_ft_in1k"
        entries.append(_hub(f"DeiT3-{size}/16-in21k-in1k", f"DeiT3-{size}/16", hub_id, "deit3", I21K, 224,
                            I1K_CLASSES, fine_tuning=I1K))  # fmt: skip
    return entries


PRETRAINED: dict[str, Pretrained] = {e.name: e for e in _original() + _augreg() + _families()}
_LOOKUP = {name.lower(): entry for name, entry in PRETRAINED.items()}
_BY_HUB_ID = {entry.hub_id: entry for entry in PRETRAINED.values() if entry.hub_id}
# `create_model(name, pretrained=True)`: the paper's own ImageNet-21k checkpoint, else AugReg's, else the
# family's first (DeiT III publishes fine-tuned weights only).
DEFAULTS = {entry.model: entry.name for entry in reversed(PRETRAINED.values()) if entry.fine_tuning is None}
DEFAULTS |= {e.model: e.name for e in reversed(PRETRAINED.values()) if e.model not in DEFAULTS}


def find(name: str) -> Pretrained | None:
    """The published checkpoint called `name` (case-insensitive), or None."""
    return _LOOKUP.get(name.lower())


def published_as(path: str | os.PathLike) -> list[Pretrained]:
    """The published checkpoints whose file bears `path`'s file name (`ViT-B_16.npz`): what a user who copied a
    file name from the docs or the bucket most likely meant."""
    file_name = Path(path).name.lower()
    return [e for e in PRETRAINED.values() if Path(e.file).name.lower() == file_name]


def missing_file_hint(path: str | os.PathLike) -> str:
    """'' or, for a missing file named like a published one, the names that load it."""
    entries = published_as(path)
    if not entries:
        return ""
    named = " or ".join(f"{e.name} ({e.file})" for e in entries)
    return f"; a published checkpoint of that file name loads by its name (cached, or downloaded): {named}"


def list_pretrained(pattern: str = "*") -> list[Pretrained]:
    """The published checkpoints whose name matches the glob `pattern` (case-insensitive)."""
    return [e for e in PRETRAINED.values() if fnmatch.fnmatch(e.name.lower(), pattern.lower())]


def default_for(model: str) -> Pretrained:
    """The checkpoint `create_model(model, pretrained=True)` loads (`model` a paper or timm name)."""
    canonical = list_models(model)  # the paper name of a paper or timm name
    if len(canonical) != 1 or canonical[0] not in DEFAULTS:
        raise ValueError(
            f"no published weights for model {model!r}; pretrained=True knows {', '.join(DEFAULTS)}"
        )
    return PRETRAINED[DEFAULTS[canonical[0]]]


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def mismatch(entry: Pretrained, config: Any, overrides: dict[str, Any]) -> str | None:
    """How a file holding `config` is not the checkpoint `entry` names: another architecture (or resolution /
    classes, unless overridden), as a wrong file at a mirror's path would be; None when it is."""
    expected = model_config(entry.model, img_size=entry.img_size, num_classes=entry.num_classes)
    fields = [f for f in ARCHITECTURE_FIELDS if f not in overrides]
    fields += [
        f for f in ("img_size", "num_classes") if f not in overrides and not overrides.get("reset_head")
    ]
    wrong = [
        f"{f} {getattr(config, f)!r} (expected {getattr(expected, f)!r})"
        for f in fields
        if getattr(config, f, None) != getattr(expected, f, None)
    ]
    return f"not the {entry.name} checkpoint ({entry.description}): {'; '.join(wrong)}" if wrong else None


def check_named(entry: Pretrained, config: Any, overrides: dict[str, Any]) -> None:
    """Refuse a file that is not the checkpoint `entry` names (see `mismatch`): one replaced in the cache by
    hand, or loaded with overrides."""
    wrong = mismatch(entry, config, overrides)
    if wrong is not None:
        raise ValueError(f"{without_credentials(entry.url)}: {wrong}")


def hub_files(spec: str) -> tuple[Path, dict[str, Any]]:
    """`hf-hub:<org>/<name>`: the weights file of a timm model on the Hugging Face Hub and the hints its
    config.json gives (`timm_hints`), through huggingface_hub's own cache (HF_HUB_CACHE, HF_HUB_OFFLINE)."""
    repo = spec[len(HF_HUB_PREFIX) :]
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(
            f"{spec}: expected hf-hub:<owner>/<model>, e.g. hf-hub:timm/vit_base_patch16_224.augreg_in21k"
        )
    try:  # optional (extra 'hub'): only Hub ids need it
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise ValueError(f"{spec}: Hub ids need huggingface_hub (pip install 'vitkit[hub]')") from None
    unreachable = None if offline() else _unreachable(constants.ENDPOINT)
    local_only = offline() or unreachable is not None  # its own retries would wait ~30 s for nothing
    try:
        config_file = Path(hf_hub_download(repo, "config.json", local_files_only=local_only))
        try:
            weights = Path(hf_hub_download(repo, "model.safetensors", local_files_only=local_only))
        except EntryNotFoundError:  # older timm uploads: a torch pickle (read with weights_only=True)
            weights = Path(hf_hub_download(repo, "pytorch_model.bin", local_files_only=local_only))
    except LocalEntryNotFoundError:
        why = (
            "downloads are off (HF_HUB_OFFLINE / VITKIT_OFFLINE)"
            if offline()
            else "the Hub cannot be reached"
        )
        if unreachable is not None:
            why = f"{constants.ENDPOINT} cannot be reached ({unreachable})"
        raise FileNotFoundError(f"{spec}: not in the Hugging Face cache and {why}") from None
    except (EntryNotFoundError, HfHubHTTPError) as error:
        raise FileNotFoundError(f"{spec}: {str(error).splitlines()[0]}") from None
    named = _BY_HUB_ID.get(repo)
    return weights, timm_hints(config_file, named.model if named is not None else None)


def hub_cached(entry: Pretrained) -> Path | None:
    """The weights file of a Hub checkpoint in huggingface_hub's cache, None when it is not there (or
    huggingface_hub is not installed)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for file in ("model.safetensors", "pytorch_model.bin"):
        found = try_to_load_from_cache(str(entry.hub_id), file)
        if isinstance(found, str):
            return Path(found)
    return None


def _unreachable(endpoint: str) -> str | None:
    """Why the Hub's address cannot be reached (no name resolution, a refused connection), found in one try
    within $VITKIT_DOWNLOAD_TIMEOUT; None when it answers or when a proxy stands between."""
    if any(os.environ.get(name) for name in _PROXY_ENVS):
        return None
    parts = urllib.parse.urlsplit(endpoint)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname or "", port), timeout=download_timeout()).close()
    except OSError as error:
        return error.strerror or str(error)
    return None


# What a registered model says that tensors do not (the rest, e.g. qkv and patch biases, they show).
REGISTRY_HINTS = (
    "num_heads",
    "activation",
    "layer_norm_eps",
    "layer_scale",
    "prefix_pos_embed",
    "probe_classifier",
)


def timm_hints(config_file: Path, model: str | None = None) -> dict[str, Any]:
    """What timm's published config.json says that tensors do not: the input size and normalisation the weights
    were trained with (its `pretrained_cfg`), and what the registered model its `architecture` names (or
    `model`, a named checkpoint's) is built with: heads, activation (QuickGELU), LayerNorm epsilon, LayerScale,
    position rows of the prefix tokens, the pooling of frozen features; its `model_args` heads win."""
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{config_file}: not a readable JSON file ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: expected a JSON object (timm's config.json)")
    pretrained_cfg = config.get("pretrained_cfg") or {}
    architecture = str(config.get("architecture", "")).partition(".")[0]
    hints: dict[str, Any] = {}
    known = [model] if model is not None else list_models(architecture or "-")
    registered = model_config(known[0]) if len(known) == 1 else None
    if isinstance(registered, ViTConfig):
        hints |= {
            key: getattr(registered, key) for key in REGISTRY_HINTS if getattr(registered, key) is not None
        }
        hints |= {
            key: getattr(registered, key) for key in ("image_mean", "image_std") if getattr(registered, key)
        }
    size = pretrained_cfg.get("input_size")
    if isinstance(size, list) and len(size) == 3:
        hints["img_size"] = (int(size[1]), int(size[2]))
    heads = (config.get("model_args") or {}).get("num_heads")
    if heads is not None:
        hints["num_heads"] = int(heads)
    for key, field in (("mean", "image_mean"), ("std", "image_std")):  # the weights' own, over the registry's
        if pretrained_cfg.get(key) is not None:
            hints.pop(field, None)
    return hints | pretrained_hints(pretrained_cfg, architecture)

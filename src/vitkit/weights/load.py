"""`load_weights`: any supported weights file or directory -> a loaded vitkit model, fine-tuning overrides.

Formats: official Google .npz (vision_transformer, both key layouts, big_vision), vitkit directories
(`save_pretrained`, or a training run whose `final/` is one), transformers directories (ViT, and the DINOv2,
CLIP and SigLIP vision towers of `hf_families`), and timm /
transformers / vitkit state dicts in .safetensors, .pth/.pt/.bin/.ckpt. Where from: a local path, a published
checkpoint's name ('ViT-B/16-i21k', `vitkit weights list`), an http(s) URL, or a Hugging Face Hub id
('hf-hub:timm/<name>'); the last three go through the download cache (vitkit.weights.hub).

Nothing in a file is ever executed: safetensors and .npz hold raw arrays (object arrays refused), and pickled
formats go through `torch.load(weights_only=True)`, whose unpickler builds only tensors and plain containers;
a pickle asking for anything else (e.g. `os.system`) is refused before any of it runs.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitkit.models.registry import Model
from vitkit.storage import CONFIG_NAME, WEIGHTS_NAME, load_state_dict, read_config
from vitkit.weights import hub
from vitkit.weights.download import fetch
from vitkit.weights.hf import class_names_from_config, hints_from_config, load_hf_state
from vitkit.weights.hf_families import MODEL_TYPES, load_family_state
from vitkit.weights.imagenet import name_classes, recognised_file
from vitkit.weights.integrity import check_weights_file
from vitkit.weights.official import load_official, read_npz
from vitkit.weights.pretrained import from_pretrained, resolve_directory
from vitkit.weights.timm import load_timm_state
from vitkit.weights.vitkit_state import load_vitkit_state

FORMATS = ("npz", "vitkit", "timm", "hf")
_PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".pkl")
_NESTED = ("state_dict", "model", "model_state_dict", "module")
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_UNSAFE_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")  # torch's wording varies: "Unsupported global: GLOBAL x", ...
_UNPICKLER_ERROR = re.compile(r"WeightsUnpickler error: \s*(.+)")


def load_weights(
    path: str | os.PathLike,
    *,
    format: str | None = None,
    keep_pre_logits: bool = False,
    reset_head: bool = False,
    source_img_size: int | tuple[int, int] | None = None,
    allow_non_finite: bool = False,
    **overrides: Any,
) -> Model:
    """Build the model a weights file or directory describes and load it (eval mode).

    `path` may also name a published checkpoint ('ViT-B/16-i21k'), an http(s) URL or 'hf-hub:timm/<name>':
    they are fetched into the cache first (vitkit.weights.hub).
    `format` ('npz', 'vitkit', 'timm', 'hf') is needed only when the file does not say. Overrides (§3.2):
    `img_size=` resamples the position embedding as the official loader does. `num_classes=K` keeps the
    stored head when it has K classes (so an ImageNet checkpoint evaluates with its 1000 classes, as timm's
    `pretrained=True, num_classes=K` and transformers' `num_labels` do); for another K, or with
    `reset_head=True` (fine-tuning on the same classes), the head is a zero-initialised one and the pre-logits
    layer is dropped unless `keep_pre_logits=True`. Other ViTConfig fields (dropout, drop_path, num_heads for
    state dicts of unusual widths...) pass through.
    `source_img_size` is the training resolution of a state dict with a non-square position grid.
    NaN or infinite weights are a ValueError naming the tensor, unless `allow_non_finite` (to inspect them).
    """
    if format is not None and format not in FORMATS:
        raise ValueError(f"{path}: format must be one of {list(FORMATS)}, got {format!r}")
    options = dict(
        keep_pre_logits=keep_pre_logits, reset_head=reset_head, allow_non_finite=allow_non_finite, **overrides
    )
    hints = {"img_size": source_img_size} if source_img_size is not None else {}
    spec = os.fspath(path)
    entry = hub.find(spec) if isinstance(spec, str) and not os.path.exists(spec) else None  # a path wins
    if entry is not None:
        source = entry.source if entry.hub_id else fetch_named(entry)
        model = load_weights(source, format=format, source_img_size=source_img_size, **options)
        hub.check_named(entry, model.config, options)
        return name_classes(model, entry)
    if isinstance(spec, str) and hub.is_url(spec):
        path = fetch(spec)
    elif isinstance(spec, str) and spec.startswith(hub.HF_HUB_PREFIX):
        weights, hub_hints = hub.hub_files(spec)
        state = read_state_dict(weights, _container(weights))
        return load_state(state, spec, format or "timm", {**hub_hints, **hints}, options)
    path = Path(path)
    if path.is_dir():
        return _load_directory(path, format, hints, options)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or directory{hub.missing_file_hint(path)}")
    kind = _container(path)
    if kind == "npz":
        if format not in (None, "npz"):
            raise ValueError(f"{path}: an .npz file holds official (JAX) weights, not format {format!r}")
        model = load_official(read_npz(path), str(path), source_img_size=source_img_size, **options)
        return name_classes(model, recognised_file(path, model.config.num_classes))
    state = read_state_dict(path, kind)
    return load_state(state, str(path), format or detect_format(state, str(path)), hints, options)


def fetch_named(entry: hub.Pretrained, progress: bool = True) -> Path:
    """A published checkpoint's file, from the cache or its (mirror's) URL; a downloaded file enters the cache
    only once it has loaded as the model its name holds. A Hub checkpoint: through huggingface_hub's cache."""
    if entry.hub_id:
        return hub.hub_files(entry.source)[0]

    def verify(part: Path) -> None:
        check_weights_file(part)
        wrong = hub.mismatch(entry, load_weights(part).config, {})
        if wrong is not None:
            raise ValueError(wrong)

    return fetch(entry.url, entry.cache_path, progress=progress, verify=verify)


def load_state(
    state: Mapping[str, torch.Tensor],
    source: str,
    format: str,
    hints: dict[str, Any],
    options: dict[str, Any],
) -> Model:
    """Dispatch a torch-layout state dict to its format's table."""
    if format == "timm":
        return load_timm_state(state, source, hints=hints, **options)
    if format == "hf":
        return load_hf_state(state, source, hints=hints, **options)
    if format == "vitkit":
        return load_vitkit_state(state, source, hints=hints, **options)
    raise ValueError(
        f"{source}: a state dict cannot be read as format {format!r}; expected timm, hf or vitkit"
    )


def _load_directory(path: Path, format: str | None, hints: dict[str, Any], options: dict[str, Any]) -> Model:
    """A vitkit save_pretrained / run directory, or a transformers save_pretrained directory."""
    directory = resolve_directory(path)
    config_path = directory / CONFIG_NAME
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{path}: a weights directory needs {CONFIG_NAME} (vitkit save_pretrained, a "
            f"training run with final/{CONFIG_NAME}, or a transformers directory)"
        )
    config = read_config(directory)
    if format == "hf" or (format is None and "num_hidden_layers" in config):
        weights = next((directory / n for n in _HF_WEIGHTS if (directory / n).is_file()), None)
        if weights is None:
            raise FileNotFoundError(f"{directory}: a transformers directory needs one of {list(_HF_WEIGHTS)}")
        state = read_state_dict(weights, _container(weights))
        if config.get("model_type") in MODEL_TYPES:  # a DINOv2 / CLIP / SigLIP vision tower
            return load_family_state(state, str(weights), config, hints=hints, **options)
        hf_hints = {**hints_from_config(config, str(config_path)), **hints}
        model = load_state(state, str(weights), "hf", hf_hints, options)
        names = class_names_from_config(config, str(config_path))
        if names is not None and not options.get("reset_head") and len(names) == model.config.num_classes:
            model.class_names = names  # id2label; a new head has no names yet
        return model
    if format not in (None, "vitkit"):
        raise ValueError(
            f"{directory}: a vitkit directory holds {CONFIG_NAME} + {WEIGHTS_NAME}, not format {format!r}"
        )
    return from_pretrained(directory, **options)


def _container(path: Path) -> str:
    """'npz', 'safetensors' or 'pickle', from the first bytes (the suffix only breaks ties)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as error:
        raise ValueError(f"{path}: cannot read ({error})") from None
    if head.startswith(b"PK"):  # a zip: numpy's .npz or torch's zip-based pickle
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError) as error:
            raise ValueError(f"{path}: damaged zip archive ({error})") from None
        return "npz" if names and all(n.endswith(".npy") for n in names) else "pickle"
    if len(head) >= 9 and head[8:9] == b"{":  # safetensors: u64 header length, then the JSON header
        return "safetensors"
    if path.suffix == ".safetensors":
        return "safetensors"
    if path.suffix == ".npz":
        return "npz"
    if head[:1] == b"\x80" or path.suffix in _PICKLE_SUFFIXES:
        return "pickle"
    raise ValueError(f"{path}: unrecognised weights file (expected .npz, .safetensors or a torch .pth/.bin)")


def read_state_dict(path: Path, kind: str) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors or pickled file, never running code from it."""
    if kind == "safetensors":
        return load_state_dict(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        unsafe = _UNSAFE_GLOBAL.search(str(error))
        if unsafe:
            raise ValueError(
                f"{path}: refused: the pickle asks for {unsafe.group(1)!r}, which is not a tensor or a "
                "plain container; vitkit never runs code from weight files (torch.load with "
                "weights_only=True)"
            ) from None
        reason = _UNPICKLER_ERROR.search(str(error))
        raise ValueError(
            f"{path}: truncated or corrupt torch file ({reason.group(1) if reason else 'unpickling failed'})"
        ) from None
    except (
        Exception
    ) as error:  # bytes that are no torch file fail anywhere in the unpickler (IndexError, ...)
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{path}: truncated or corrupt torch file ({first})") from None
    return _unwrap(obj, path)


def _unwrap(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    """The state dict in a loaded object: itself, or under 'state_dict' / 'model' (training checkpoints)."""
    if isinstance(obj, Mapping):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            state = dict(obj)
            if all(k.startswith("module.") for k in state):  # DistributedDataParallel
                state = {k[len("module.") :]: v for k, v in state.items()}
            return state
        for key in _NESTED:
            if isinstance(obj.get(key), Mapping):
                return _unwrap(obj[key], path)
    found = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
    raise ValueError(
        f"{path}: no state dict of tensors found (top level: {found}); expected a dict of tensors or "
        f"one under {list(_NESTED)}"
    )


def detect_format(state: Mapping[str, torch.Tensor], source: str) -> str:
    """Which library wrote a state dict, from its key names."""
    keys = set(state)
    if any(
        "embeddings.patch_embeddings" in k or k.endswith("embeddings.patch_embedding.weight") for k in keys
    ):
        return "hf"
    if "pos_embed" in keys or any(
        k.startswith(("patch_embed.backbone.", "head.fc.", "head.pre_logits.")) for k in keys
    ):
        return "timm"
    if "pos_embed.weight" in keys or any(k.startswith(("backbone.conv_root", "pre_logits.fc")) for k in keys):
        return "vitkit"
    if "patch_embed.proj.weight" in keys:
        raise ValueError(f"{source}: cannot tell whether this state dict is timm's or vitkit's; pass format=")
    raise ValueError(
        f"{source}: not a ViT state dict of timm, transformers or vitkit (first keys: {sorted(keys)[:5]}); "
        "pass format= if it is one"
    )

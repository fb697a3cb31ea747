"""What the service runs: any weights vitkit loads, or an exported `.onnx` / `.pt2` file, as a function from a
batch of preprocessed images to class probabilities, with what a client is told about it (name, version, input
size, class names).

The PyTorch path is `vitkit predict`'s: the precision `auto` picks for the batch size the service gathers, the
weights held in bf16 when it picks bf16 (Precision.inference). Exported files run as exported (float32): ONNX
Runtime on the CPU, or the `torch.export` program. Only a PyTorch ViT can draw its attention rollout (the paper's
Fig. 6, vitkit.inspect): an exported graph has no attention maps to read.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vitkit.data.transforms import MeanStd, eval_transform
from vitkit.device import resolve_device
from vitkit.export.onnx_export import read_onnx_metadata, runner
from vitkit.export.program_export import load_program
from vitkit.inspect.attention import attention_rollout, rollout_to_patches, token_grid
from vitkit.models.config import ViTConfig, to_pair
from vitkit.models.registry import MODELS, Model, model_config
from vitkit.models.vit import VisionTransformer
from vitkit.precision import inference_precision
from vitkit.version import __version__
from vitkit.weights import load_weights
from vitkit.weights.hub import ARCHITECTURE_FIELDS

EXPORTED_SUFFIXES = (".onnx", ".pt2")
DIGEST_CHARS = 12
Probabilities = Callable[[torch.Tensor], torch.Tensor]  # [B, C, H, W] preprocessed -> [B, classes] float32


@dataclass(frozen=True)
class Explained:
    """One image's class probabilities and its attention rollout on the patch grid (rows sum to 1 overall)."""

    probs: torch.Tensor
    rollout: torch.Tensor  # [gh, gw]


@dataclass
class Session:
    """What the model thread calls while the service runs: `probs` for batches, `explain` for the page's
    rollout (None when the model cannot draw one), and the precision it computes in."""

    probs: Probabilities
    explain: Callable[[torch.Tensor], Explained] | None
    precision: str  # 'bf16' or 'fp32'
    precision_reason: str


@dataclass
class ServedModel:
    """A loaded model and the facts the API reports with every answer."""

    name: str
    version: str
    architecture: str
    runtime: str  # "pytorch", "onnxruntime" or "torch.export"
    input_size: tuple[int, int, int]  # channels, height, width
    num_classes: int
    class_names: list[str] | None
    open_session: Callable[[int], contextlib.AbstractContextManager[Session]] = field(repr=False)
    mean_std: MeanStd = None  # the weights' normalisation (a config's, an export's metadata); None: [-1, 1]
    precision: str = "not decided yet"
    precision_reason: str = "the model thread decides it as it starts"

    def info(self) -> dict[str, Any]:
        """The `model` object of every answer."""
        channels, height, width = self.input_size
        return {
            "name": self.name,
            "version": self.version,
            "architecture": self.architecture,
            "runtime": self.runtime,
            "precision": self.precision,
            "precision_reason": self.precision_reason,
            "input_size": [channels, height, width],
            "num_classes": self.num_classes,
            "vitkit_version": __version__,
        }

    def preprocess(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 [3, H, W] decoded pixels -> the model's [C, h, w] float32 input (`vitkit predict`'s transform)."""
        channels, height, width = self.input_size
        return eval_transform(pixels[None], (height, width), channels, self.mean_std)[0]

    def label(self, index: int) -> str:
        return self.class_names[index] if self.class_names else str(index)


def load_served_model(
    weights: str, *, format: str | None = None, device: str = "auto", precision: str = "auto"
) -> ServedModel:
    """The model `weights` names (a run, a save_pretrained directory, a named checkpoint, a weights file, or an
    exported .onnx / .pt2), loaded; its precision is decided when the model thread opens its session."""
    suffix = Path(weights).suffix.lower()
    if suffix in EXPORTED_SUFFIXES:
        if not Path(weights).is_file():
            raise FileNotFoundError(f"{weights}: no such file")
        if precision == "bf16":
            raise ValueError(
                f"{weights}: an exported file runs in float32 as exported; --precision bf16 needs weights"
            )
        return (load_onnx if suffix == ".onnx" else load_exported_program)(weights)
    model = load_weights(weights, format=format)
    if not model.config.num_classes:
        raise ValueError(f"{weights}: the model has no classification head (num_classes=0)")
    return pytorch_model(model, display_name(weights), resolve_device(device), precision)


def display_name(weights: str) -> str:
    """A run or file by its own name ('runs/photos' -> 'photos'); a checkpoint name or URL as given."""
    return Path(weights).name if os.path.exists(weights) else weights


def pytorch_model(model: Model, name: str, device: torch.device, precision: str) -> ServedModel:
    model = model.to(device).eval()
    config = model.config

    @contextlib.contextmanager
    def open_session(batch_size: int) -> Iterator[Session]:
        chosen = inference_precision(precision, model, batch_size)
        with torch.inference_mode(), chosen.inference(model) as forward:

            def probs(x: torch.Tensor) -> torch.Tensor:
                return forward(x.to(device)).float().softmax(-1).cpu()

            explain = None
            if isinstance(model, VisionTransformer):

                def explain(x: torch.Tensor) -> Explained:
                    return explained(model, x.to(device))

            yield Session(probs, explain, chosen.name, chosen.reason)

    return ServedModel(
        name=name,
        version=state_digest(model),
        architecture=architecture_name(config),
        runtime="pytorch",
        input_size=config.input_size,
        num_classes=config.num_classes,
        class_names=model.class_names,
        open_session=open_session,
        mean_std=config.mean_std,
    )


def explained(model: VisionTransformer, image: torch.Tensor) -> Explained:
    """Probabilities and Fig. 6's rollout for one preprocessed image [C, H, W], from one explicit-attention pass."""
    x = image[None]
    tokens, maps = model.forward_attention(x)
    probs = model.forward_head(tokens).float().softmax(-1)[0].cpu()
    config = model.config
    joint = attention_rollout(maps)
    rollout = rollout_to_patches(joint, token_grid(model, x), config.num_prefix_tokens, config.classifier)
    return Explained(probs, rollout[0].float().cpu())


def unreadable(path: str, what: str, error: Exception) -> ValueError:
    why = " ".join(f"{type(error).__name__}: {error}".split())
    return ValueError(f"{path}: cannot read it as {what} ({why})")


def load_onnx(path: str) -> ServedModel:
    """The file's metadata and an ONNX Runtime session made now, so that a damaged file fails as it loads."""
    try:
        metadata = read_onnx_metadata(path)
        run = runner(path, threads=torch.get_num_threads())
    except (ValueError, ImportError):
        raise
    except Exception as error:  # protobuf's DecodeError, ONNX Runtime's errors on a graph it cannot load, ...
        raise unreadable(path, "a vitkit ONNX export", error) from None

    @contextlib.contextmanager
    def open_session(batch_size: int) -> Iterator[Session]:
        yield Session(
            lambda x: torch.from_numpy(run(x.numpy())).softmax(-1),
            None,
            "fp32",
            "ONNX Runtime runs the file as exported",
        )

    return exported_model(path, metadata, "onnxruntime", open_session)


def load_exported_program(path: str) -> ServedModel:
    """The program and its metadata; torch's own log of a failed load (a traceback as warnings) is kept quiet,
    the one-line error says it."""
    torch_export_log = logging.getLogger("torch.export")
    level = torch_export_log.level
    torch_export_log.setLevel(logging.CRITICAL)
    try:
        module, metadata = load_program(path)
    except (ValueError, FileNotFoundError):
        raise
    except Exception as error:
        raise unreadable(path, "a vitkit torch.export program", error) from None
    finally:
        torch_export_log.setLevel(level)

    @contextlib.contextmanager
    def open_session(batch_size: int) -> Iterator[Session]:
        with torch.inference_mode():
            yield Session(
                lambda x: module(x).float().softmax(-1),
                None,
                "fp32",
                "the torch.export program runs as exported",
            )

    return exported_model(path, metadata, "torch.export", open_session)


def exported_model(
    path: str,
    metadata: dict[str, Any],
    runtime: str,
    open_session: Callable[[int], contextlib.AbstractContextManager[Session]],
) -> ServedModel:
    channels, height, width = metadata["input_size"]
    return ServedModel(
        name=Path(path).name,
        version=file_digest(path),
        architecture=str(metadata.get("architecture", "exported model")),
        runtime=runtime,
        input_size=(channels, height, width),
        num_classes=int(metadata["num_classes"]),
        class_names=metadata.get("class_names"),
        open_session=open_session,
        mean_std=(metadata["mean"], metadata["std"]) if "mean" in metadata else None,
    )


def architecture_name(config: Any) -> str:
    """The registered variant a configuration is ('ViT-S/16'), with its resolution; else its class's name."""
    fields = {key: getattr(config, key, None) for key in ARCHITECTURE_FIELDS}
    height, width = to_pair(config.img_size)
    for name in MODELS:
        registered = model_config(name)
        if type(registered) is type(config) and all(
            getattr(registered, key, None) == value for key, value in fields.items()
        ):
            return f"{name} at {height}x{width}"
    kind = "ViT" if isinstance(config, ViTConfig) else "ResNet"
    return f"{kind} ({config.num_classes} classes) at {height}x{width}"


def state_digest(model: torch.nn.Module) -> str:
    """'sha256:<12 hex>' of the weights' values: the same weights give the same version whatever file they came
    from, and any change of a weight gives another."""
    digest = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()[:DIGEST_CHARS]}"


def file_digest(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()[:DIGEST_CHARS]}"

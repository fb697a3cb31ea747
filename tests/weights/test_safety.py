"""Refusals: code-carrying pickles are not run; damaged files and mismatched weights say what is wrong."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from vitkit.cli import main
from vitkit.storage import load_state_dict, save_state_dict
from vitkit.weights.official import read_npz
from vitkit.weights.vitkit_state import refuse_non_finite

from .conftest import DATA


class Payload:
    """Unpickling this runs `touch <marker>`: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("container", ["torch_zip", "legacy_pickle"])
def test_malicious_pickle_is_refused_without_running(container: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    if container == "torch_zip":
        torch.save({"patch_embed.proj.weight": torch.zeros(1), "hook": Payload(marker)}, path)
    else:
        path.write_bytes(pickle.dumps({"hook": Payload(marker)}, protocol=2))
    with pytest.raises(ValueError, match=r"evil\.pth: refused: the pickle asks for '(posix|os)\.system'"):
        vitkit.load_weights(path)
    assert not marker.exists()
    pickle.loads(pickle.dumps(Payload(tmp_path / "proof")))  # the payload is live: plain pickle would run it
    assert (tmp_path / "proof").exists()


def test_npz_with_object_arrays_is_refused(tmp_path: Path) -> None:
    arrays = read_npz(DATA / "A_params.npz")
    arrays["head/bias"] = np.array([{"not": "a tensor"}], dtype=object)
    np.savez(tmp_path / "obj.npz", **arrays)
    with pytest.raises(ValueError, match=r"obj\.npz: not a readable \.npz file.*allow_pickle"):
        vitkit.load_weights(tmp_path / "obj.npz")


def truncate(source: Path, target: Path) -> Path:
    data = source.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    return target


def test_truncated_files(tmp_path: Path) -> None:
    model = vitkit.load_weights(DATA / "A_params.npz")
    save_state_dict(model.state_dict(), tmp_path / "ok.safetensors")
    torch.save(model.state_dict(), tmp_path / "ok.pth")
    cases = {
        truncate(DATA / "A_params.npz", tmp_path / "cut.npz"): "cut.npz: (not a readable .npz|damaged zip)",
        truncate(
            tmp_path / "ok.safetensors", tmp_path / "cut.safetensors"
        ): "cut.safetensors: not a readable safetensors",
        truncate(tmp_path / "ok.pth", tmp_path / "cut.pth"): r"cut\.pth: (truncated or corrupt|damaged zip)",
    }
    for path, message in cases.items():
        with pytest.raises(ValueError, match=message):
            vitkit.load_weights(path)
    (tmp_path / "junk.bin").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match=r"junk\.bin: truncated or corrupt"):
        vitkit.load_weights(tmp_path / "junk.bin")
    with pytest.raises(FileNotFoundError, match=r"nothing\.npz"):
        vitkit.load_weights(tmp_path / "nothing.npz")


def test_missing_official_keys(tmp_path: Path) -> None:
    arrays = read_npz(DATA / "A_params.npz")
    del arrays["Transformer/encoder_norm/scale"]
    np.savez(tmp_path / "no_norm.npz", **arrays)
    with pytest.raises(ValueError, match=r"no_norm\.npz.*missing key\(s\) \[norm\.weight\]"):
        vitkit.load_weights(tmp_path / "no_norm.npz")
    arrays = read_npz(DATA / "A_params.npz")
    del arrays["Transformer/encoderblock_1/MultiHeadDotProductAttention_0/key/kernel"]
    np.savez(tmp_path / "no_key.npz", **arrays)
    with pytest.raises(
        ValueError, match=r"no_key\.npz.*incomplete.*encoderblock_1/MultiHeadDotProductAttention_0/key/kernel"
    ):
        vitkit.load_weights(tmp_path / "no_key.npz")


def test_unknown_and_misshapen_official_keys(tmp_path: Path) -> None:
    arrays = read_npz(DATA / "A_params.npz")
    arrays["Transformer/encoderblock_0/Extra_0/scale"] = np.ones(3, np.float32)
    np.savez(tmp_path / "extra.npz", **arrays)
    with pytest.raises(ValueError, match=r"extra\.npz.*no vitkit counterpart.*Extra_0/scale"):
        vitkit.load_weights(tmp_path / "extra.npz")
    arrays = read_npz(DATA / "A_params.npz")
    arrays["head/bias"] = np.zeros(11, np.float32)
    np.savez(tmp_path / "shape.npz", **arrays)
    with pytest.raises(
        ValueError,
        match=r"shape\.npz.*shape mismatch \[head\.bias \(from head/bias\): file \[11\], "
        r"model expects \[10\]\]",
    ):
        vitkit.load_weights(tmp_path / "shape.npz")


def test_directory_mismatches(tmp_path: Path) -> None:
    model = vitkit.load_weights(DATA / "A_params.npz")
    model.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "num_classes": 7}))
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors: weights do not fit VisionTransformer.*shape mismatch "
        r"\[.*head\.weight: file \[10, 48\], model expects \[7, 48\]",
    ):
        vitkit.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    state = load_state_dict(tmp_path / "m" / "model.safetensors")
    del state["blocks.1.norm2.bias"]
    save_state_dict(state, tmp_path / "m" / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing key\(s\) \[blocks\.1\.norm2\.bias\]"):
        vitkit.load_weights(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{broken")
    with pytest.raises(ValueError, match=r"config\.json: invalid JSON"):
        vitkit.load_weights(tmp_path / "m")


def test_ambiguous_and_unknown_state_dicts(tmp_path: Path) -> None:
    save_state_dict({"foo.weight": torch.zeros(2)}, tmp_path / "foo.safetensors")
    with pytest.raises(ValueError, match="not a ViT state dict"):
        vitkit.load_weights(tmp_path / "foo.safetensors")
    with pytest.raises(ValueError, match="format must be one of"):
        vitkit.load_weights(tmp_path / "foo.safetensors", format="onnx")


def test_cli_reports_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncate(DATA / "A_params.npz", tmp_path / "cut.npz")
    assert main(["convert", str(tmp_path / "cut.npz"), str(tmp_path / "out"), "--to", "vitkit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vitkit convert: error:") and "cut.npz" in err[0]


def test_non_finite_check_counts_exactly_where_a_sum_would_overflow() -> None:
    """The check's fast path sums each tensor: large finite weights (whose sum overflows) still load, and a NaN
    or inf among them is still counted, element by element."""
    big = torch.full((4, 4), 3e38)
    refuse_non_finite({"w": big, "half": torch.full((100,), 6e4, dtype=torch.float16)}, "src")
    for bad in (float("nan"), float("inf"), -float("inf")):
        state = {"ok": torch.ones(3), "w": big.clone()}
        state["w"][1, 2] = bad
        with pytest.raises(ValueError, match=r"src: 1 NaN or infinite value\(s\) in w; expected finite"):
            refuse_non_finite(state, "src")
    cancelling = torch.tensor([float("inf"), -float("inf")])  # inf - inf: a NaN sum, two bad elements
    with pytest.raises(ValueError, match=r"2 NaN or infinite value\(s\) in c"):
        refuse_non_finite({"c": cancelling}, "src")

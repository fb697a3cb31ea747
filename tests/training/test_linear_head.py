"""train.fit='linear' (configs/photos_linear.toml): a closed-form head on frozen features, written as an ordinary
run directory that predict, eval and convert read; its features cached per weights, preprocessing and file."""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from image_collections import write_folder, write_packed
from timestamped import timestamped_output
from tiny import build_tiny_vit
from vitkit import cli
from vitkit.cache import CACHE_ENV
from vitkit.data import FolderSource
from vitkit.evaluation.fewshot import extract_features, precompute
from vitkit.recipe.resolve import RecipeRequest, load_config, resolve_recipe
from vitkit.training.features import FeatureStore, weights_digest
from vitkit.training.linear_head import chosen_l2, cross_validated, fold_of

ROOT = Path(__file__).parents[2]
RECIPE = str(ROOT / "configs" / "photos_linear.toml")


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """60 train / 20 test synthetic PNGs in 10 named class folders."""
    return write_folder(tmp_path_factory.mktemp("linear") / "photos")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """A small pretrained-like ViT (7 classes: the head the fit replaces) saved as a weights directory."""
    path = tmp_path_factory.mktemp("weights") / "vit"
    build_tiny_vit(img_size=32, patch_size=8, num_classes=7).save_pretrained(path)
    return path


def fit(weights: Path, photos: Path, out: Path, *extra: str) -> dict:
    """`vitkit finetune` with photos_linear.toml on the folder at 32 px, in fp32."""
    argv = ["finetune", "--weights", str(weights), "--config", RECIPE, f"data.source=folder:{photos}"]
    assert cli.main([*argv, "model.img_size=32", "train.precision=fp32", "--out", str(out), *extra]) == 0
    return json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_the_run_is_the_closed_form_head_and_every_command_reads_it(weights, photos, tmp_path, capsys):
    report = fit(weights, photos, tmp_path / "run")
    assert report["fit"] == "linear" and report["train_images"] == 60 and report["test_images"] == 20
    assert report["test_top1"] > 0.3  # 10 classes: a head that was not fitted scores 10%
    model = vitkit.load_weights(tmp_path / "run")
    train = FolderSource(photos, "train")
    images = torch.stack([train.read(i) for i in range(len(train))])
    labels = train.labels.numpy()
    features = extract_features(model, images)
    a, b = precompute(features, labels, 10).affine(report["l2"])
    logits = model.head(torch.from_numpy(features)).detach().numpy()
    np.testing.assert_allclose(logits, features @ a + b, rtol=1e-4, atol=1e-4)
    assert model.class_names == sorted(p.name for p in (photos / "train").iterdir())

    one = next((photos / "test").glob("*/*.png"))
    capsys.readouterr()
    assert cli.main(["predict", str(one), "--weights", str(tmp_path / "run"), "--topk", "10"]) == 0
    printed = capsys.readouterr().out
    assert all(f"  {name} (" in printed for name in model.class_names)  # by name, not by index
    assert cli.main(["eval", "--weights", str(tmp_path / "run")]) == 0
    assert (
        cli.main(["convert", str(tmp_path / "run"), str(tmp_path / "timm.safetensors"), "--to", "timm"]) == 0
    )
    assert (tmp_path / "run" / "confusion.png").is_file() and (tmp_path / "run" / "config.toml").is_file()


@pytest.mark.slow
def test_a_second_fit_computes_only_new_or_changed_files(weights, photos, tmp_path):
    first = fit(weights, photos, tmp_path / "first")
    assert first["features_computed"] in (0, 80)  # 0: another test of this module filled the cache
    again = fit(weights, photos, tmp_path / "again", "train.linear_l2=[4, 16]")
    assert again["features_computed"] == 0 and again["l2"] in (4.0, 16.0)
    train = sorted((photos / "train").glob("*/*.png"))
    copied = train[0].with_name("copied.png")  # a copy: the same content, its features cached
    copied.write_bytes(train[0].read_bytes())
    added = train[0].with_name("added.png")  # new content
    added.write_bytes(train[1].read_bytes() + b"\0")  # a byte after the PNG's end: other content
    touched = next((photos / "test").glob("*/*.png"))  # a new modification time, the same content
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    changed = sorted((photos / "test").glob("*/*.png"))[-1]  # rewritten in place: size and time kept
    original, stat = changed.read_bytes(), changed.stat()
    flat = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(flat, format="PNG")  # smaller than any of the photos
    changed.write_bytes(flat.getvalue().ljust(stat.st_size, b"\0"))
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    try:
        third = fit(weights, photos, tmp_path / "third")
    finally:
        copied.unlink()
        added.unlink()
        changed.write_bytes(original)
    assert third["features_computed"] == 2 and third["train_images"] == 62


def test_the_features_key_ignores_the_head(tiny_vit):
    ten = tiny_vit()
    ten.reset_classifier(10)
    assert weights_digest(tiny_vit()) == weights_digest(ten)
    other = tiny_vit()
    with torch.no_grad():
        other.blocks[0].mlp.fc1.weight[0, 0] += 1e-3
    assert weights_digest(other) != weights_digest(tiny_vit())


def test_folds_are_stratified_and_the_l2_is_chosen_on_held_out_images():
    labels = np.repeat(np.arange(3), 10)
    folds = fold_of(labels, 5, seed=0)
    assert all(np.bincount(folds[labels == c], minlength=5).tolist() == [2] * 5 for c in range(3))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 40)) + 3.0 * np.eye(3)[labels] @ rng.normal(size=(3, 40))
    scores = cross_validated(x, labels, 3, [1.0, 1e9], seed=0)
    assert scores[1.0] > 0.9 and scores[1e9] <= scores[1.0]
    assert chosen_l2({1.0: 0.5, 4.0: 0.5, 16.0: 0.25}) == 4.0


@pytest.mark.slow
def test_linear_needs_weights_and_does_not_resume(weights, photos, tmp_path, capsys):
    assert cli.main(["train", "--config", RECIPE, f"data.source=folder:{photos}", "--print-config"]) == 2
    assert "give --weights" in capsys.readouterr().err
    fit(weights, photos, tmp_path / "run")
    argv = ["finetune", "--weights", str(weights), "--config", RECIPE, f"data.source=folder:{photos}"]
    resume = [*argv, "model.img_size=32", "train.precision=fp32", "--out", str(tmp_path / "run"), "--resume"]
    assert cli.main(resume) == 2
    assert "no steps to resume" in capsys.readouterr().err


def finetuning(recipe: str, settings: list[tuple[str, object]], quiet: bool = False):
    """The recipe `vitkit finetune --weights w --config <recipe>` with `settings` resolves to."""
    return resolve_recipe(
        RecipeRequest("finetune", ROOT / "configs" / recipe, settings, weights="w", quiet=quiet)
    )


def test_a_recipe_length_in_epochs_follows_the_folder(photos, capsys):
    epochs = load_config(ROOT / "configs" / "photos_finetune.toml").train.epochs
    source = [("data.source", f"folder:{photos}"), ("train.batch_size", 8)]
    resolved = finetuning("photos_finetune.toml", source)
    assert resolved.train.steps == int(np.ceil(epochs * 60 / 8)) and resolved.train.epochs == 0
    assert resolved.optim.warmup_steps < resolved.train.steps
    assert f"{epochs:g} epochs: {resolved.train.steps} steps" in capsys.readouterr().out
    assert finetuning("photos_finetune.toml", [*source, ("train.steps", 3)]).train.steps == 3
    with pytest.raises(ValueError, match="once"):
        finetuning("photos_finetune.toml", [*source, ("train.steps", 3), ("train.epochs", 2.0)])


def test_linear_l2_takes_a_list_of_numbers():
    resolved = finetuning("photos_linear.toml", [("train.linear_l2", [1, 2.5])], quiet=True)
    assert resolved.train.linear_l2 == [1.0, 2.5]
    with pytest.raises(ValueError, match="train.linear_l2"):
        finetuning("photos_linear.toml", [("train.linear_l2", "x")], quiet=True)


def test_a_stream_of_shards_is_refused_in_one_line(weights, photos, tmp_path, capsys):
    shards = write_packed(photos, tmp_path / "shards", "wds", shard_images=30)
    argv = ["finetune", "--weights", str(weights), "--config", RECIPE, f"data.source=wds:{shards}"]
    assert cli.main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert "train.fit='linear' needs an indexable data.source" in capsys.readouterr().err
    assert not (tmp_path / "run" / "config.toml").exists()


SLOW_FORWARD = """
import sys, time
from vitkit import cli
from vitkit.models.vit import VisionTransformer

forward = VisionTransformer.forward

def slow_forward(self, *args, **kwargs):  # every batch takes a second more: a large ViT on a small CPU
    time.sleep(1.0)
    return forward(self, *args, **kwargs)

VisionTransformer.forward = slow_forward
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_the_fast_path_prints_as_every_batch_of_features_is_computed(weights, photos, tmp_path):
    """No stretch of the fast path's output goes long without a line: the features' progress moves with every
    batch (timestamped as the output arrives; tqdm's carriage returns end lines too)."""
    argv = [
        "finetune",
        "--weights",
        str(weights),
        "--config",
        "photos_linear",
        f"data.source=folder:{photos}",
    ]
    argv += [
        "model.img_size=32",
        "train.precision=fp32",
        "train.batch_size=8",
        "--out",
        str(tmp_path / "run"),
    ]
    cache = {CACHE_ENV: str(tmp_path / "cache")}  # no features cached by other tests: every batch computed
    stamped = timestamped_output(SLOW_FORWARD, argv, tmp_path, timeout=300, env=cache)
    first = next(t for t, line in stamped if line.startswith("linear head on frozen features"))
    times = [first] + [t for t, _ in stamped if t >= first]
    assert len(times) > 11, stamped  # 60 + 20 images in batches of 8: a line for each of 10 batches at least
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < 1.0 + 6, stamped  # a loaded CPU


def test_a_quiet_fit_prints_nothing(weights, photos, tmp_path, capfd, measuring_precision):
    report = fit(weights, photos, tmp_path / "run", "--quiet", "train.precision=auto")
    assert capfd.readouterr() == ("", "") and report["fit"] == "linear"


@pytest.mark.slow
def test_an_interrupted_fit_keeps_the_features_it_computed(weights, photos, tmp_path, monkeypatch, capsys):
    """Ctrl-C during the feature extraction: the batches computed are kept in the cache, and the same command
    computes only the others."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    added, batches = FeatureStore.add, []

    def add_then_ctrl_c(self, keys, features):
        added(self, keys, features)
        batches.append(len(keys))
        if len(batches) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(FeatureStore, "add", add_then_ctrl_c)
    argv = ["finetune", "--weights", str(weights), "--config", RECIPE, f"data.source=folder:{photos}",
            "model.img_size=32", "train.precision=fp32", "train.eval_batch_size=8", "--out", str(tmp_path / "run")]  # fmt: skip
    assert cli.main(argv) == cli.INTERRUPTED
    assert "16 features computed so far are kept" in capsys.readouterr().err
    monkeypatch.setattr(FeatureStore, "add", added)
    assert cli.main(argv) == 0  # the same command, into the same --out
    assert json.loads((tmp_path / "run" / "report.json").read_text())["features_computed"] == 80 - 16

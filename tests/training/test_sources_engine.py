"""Training on a source read per image: a folder's and a Hugging Face dataset's losses and weights equal those of
the same images held in memory, bitwise; a resume that changes data.workers ends bitwise where the uninterrupted
run ends; shard streams train and refuse a resume that would read them differently."""

from __future__ import annotations

import json
import shutil

import pytest
from test_resume import assert_bitwise_equal

from image_collections import in_memory, write_folder, write_packed
from vitkit import cli
from vitkit.data import FolderSource
from vitkit.training import build

STEPS = 6
FINAL = f"checkpoints/step_{STEPS:08d}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("folder"))


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory, folder, tiny_recipe):
    """The tiny recipe on the folder's images held in memory (decoded for the 1-channel ViT)."""
    out = tmp_path_factory.mktemp("memory") / "run"
    memory = {split: in_memory(FolderSource(folder, split), channels=1) for split in ("train", "test")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "open_source", lambda spec, split, *args, **kwargs: memory[split])
        assert train(out, folder, tiny_recipe) == 0
    return out


def losses(run):
    return [line["train_loss"] for line in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "train_loss" in line]  # fmt: skip


def train(out, folder, tiny_recipe, *extra):
    args = [
        "train",
        "--out",
        str(out),
        "--steps",
        str(STEPS),
        "--checkpoint-every",
        "3",
        *tiny_recipe,
        "train.batch_size=12",
    ]
    return cli.main([*args, "data.crop=inception", f"data.source=folder:{folder}", *extra])


@pytest.mark.parametrize(
    "kind", ["folder", pytest.param("hf", marks=pytest.mark.slow)]
)  # hf batches: tests/data
def test_run_equals_the_in_memory_run_bitwise(tmp_path, folder, memory_run, tiny_recipe, kind):
    if kind == "hf":
        pytest.importorskip("datasets")
    source = f"{kind}:{folder if kind == 'folder' else write_packed(folder, tmp_path / 'hf', 'hf')}"
    assert train(tmp_path / "run", folder, tiny_recipe, "data.workers=2", f"data.source={source}") == 0
    assert losses(tmp_path / "run") == losses(memory_run) and len(losses(memory_run)) == STEPS
    assert_bitwise_equal(tmp_path / "run/final/model.safetensors", memory_run / "final/model.safetensors")
    report = json.loads((tmp_path / "run/report.json").read_text())
    assert report["skipped_images"] == [] and "decoded per sample" in report["train_data"]


@pytest.mark.slow  # two runs; tests/data/test_shards.py checks the streams themselves in the fast suite
def test_shard_streams_train_and_resume_only_as_they_were_read(tmp_path, folder, tiny_recipe, capsys):
    shards = write_packed(folder, tmp_path / "wds", "wds", shard_images=5)
    out = tmp_path / "run"
    assert train(out, folder, tiny_recipe, f"data.source=wds:{shards}", "data.workers=2") == 0
    assert len(losses(out)) == STEPS and json.loads((out / "report.json").read_text())["test_images"] == 20
    shutil.rmtree(out / FINAL)
    assert train(out, folder, tiny_recipe, f"data.source=wds:{shards}", "data.workers=1", "--resume") == 2
    assert (
        "read its shards as 2 streams (ranks x data.workers) and would now read 1" in capsys.readouterr().err
    )


@pytest.mark.slow  # two runs; tests/data/test_pipeline.py checks the batches themselves in the fast suite
def test_resume_with_other_workers_is_bitwise(tmp_path, folder, tiny_recipe):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    assert train(reference, folder, tiny_recipe, "data.workers=0") == 0
    shutil.copytree(reference, resumed)  # as if killed after the step-3 checkpoint
    for name in (FINAL, "final", "report.json"):
        shutil.rmtree(resumed / name) if (resumed / name).is_dir() else (resumed / name).unlink()
    assert train(resumed, folder, tiny_recipe, "data.workers=2", "--resume") == 0
    assert losses(resumed) == losses(reference)
    assert_bitwise_equal(resumed / FINAL / "model.safetensors", reference / FINAL / "model.safetensors")

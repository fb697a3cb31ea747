"""Training on a lazily read source: the losses and weights of the same images held in memory, bitwise, and a
resume that changes data.workers ends bitwise where the uninterrupted run ends."""

from __future__ import annotations

import json
import shutil

import pytest
from image_collections import in_memory, write_folder
from test_resume import assert_bitwise_equal

from vitkit import cli
from vitkit.data import FolderSource
from vitkit.train import engine

STEPS = 6
FINAL = f"checkpoints/step_{STEPS:08d}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("folder"))


def losses(run):
    return [line["train_loss"] for line in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "train_loss" in line]  # fmt: skip


def train(out, folder, tiny, *extra):
    args = ["train", "--out", str(out), "--steps", str(STEPS), "--checkpoint-every", "3", *tiny]
    return cli.main([*args, "train.batch_size=12", "data.crop=inception", f"data.source=folder:{folder}", *extra])


def test_folder_run_equals_the_in_memory_run_bitwise(tmp_path, folder, tiny, monkeypatch):
    assert train(tmp_path / "folder", folder, tiny, "data.workers=2") == 0
    memory = {split: in_memory(FolderSource(folder, split), channels=1) for split in ("train", "test")}  # 1-channel ViT
    monkeypatch.setattr(engine, "open_source", lambda spec, split, *args, **kwargs: memory[split])
    assert train(tmp_path / "memory", folder, tiny) == 0
    assert losses(tmp_path / "folder") == losses(tmp_path / "memory") and len(losses(tmp_path / "folder")) == STEPS
    assert_bitwise_equal(tmp_path / "folder/final/model.safetensors", tmp_path / "memory/final/model.safetensors")
    report = json.loads((tmp_path / "folder/report.json").read_text())
    assert report["skipped_images"] == [] and "decoded per sample" in report["train_data"]


@pytest.mark.slow  # two runs; tests/data/test_pipeline.py checks the batches themselves in the fast suite
def test_resume_with_other_workers_is_bitwise(tmp_path, folder, tiny):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    assert train(reference, folder, tiny, "data.workers=0") == 0
    shutil.copytree(reference, resumed)  # as if killed after the step-3 checkpoint
    for name in (FINAL, "final", "report.json"):
        shutil.rmtree(resumed / name) if (resumed / name).is_dir() else (resumed / name).unlink()
    assert train(resumed, folder, tiny, "data.workers=2", "--resume") == 0
    assert losses(resumed) == losses(reference)
    assert_bitwise_equal(resumed / FINAL / "model.safetensors", reference / FINAL / "model.safetensors")

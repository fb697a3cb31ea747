"""`vitkit predict --output`: JSON Lines and CSV a program reads, errors as records, names from the weights."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tiny import build_tiny_vit
from vitkit.cli import main
from vitkit.data.decode import decode_image
from vitkit.data.transforms import eval_transform

NAMES = ["cat", "dog", "ship", "car", "frog"]
IMAGES = 10  # above the progress bar's threshold


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random ViT whose config.json carries class names."""
    model = build_tiny_vit("ViT-B/16", num_classes=5)
    with torch.no_grad():
        model.head.weight.normal_(std=1.0)  # distinct probabilities, so ranks and names are tested
    model.class_names = NAMES
    return model.save_pretrained(tmp_path_factory.mktemp("weights") / "model")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """IMAGES readable images of several sizes, an empty PNG and text named .jpg."""
    rng = np.random.default_rng(0)
    root = tmp_path / "photos"
    (root / "sub").mkdir(parents=True)
    for i in range(IMAGES):
        pixels = rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / ("sub" if i % 2 else "") / f"img{i:02d}.png")
    (root / "empty.png").write_bytes(b"")
    (root / "notes.jpg").write_text("not an image")
    return root


def reference(weights: Path, path: str) -> torch.Tensor:
    model = vitkit.load_weights(weights).eval()
    with torch.no_grad():
        return model(eval_transform(decode_image(path)[None], 16, 3)).softmax(-1)[0]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["predict", *argv, "--precision", "fp32", "--device", "cpu"])
    out, err = capsys.readouterr()
    return code, out, err


def test_jsonl_one_record_per_image_errors_included(weights, folder, tmp_path, capsys) -> None:
    output = tmp_path / "preds.jsonl"
    code, out, err = run(
        [str(folder), "--weights", str(weights), "--output", str(output), "--topk", "3"], capsys
    )
    assert code == 0  # a directory scan skips unreadable files with a line each
    assert out == ""  # no tables when writing a file
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == IMAGES + 2
    errors = {Path(r["path"]).name: r["error"] for r in records if "error" in r}
    assert sorted(errors) == ["empty.png", "notes.jpg"] and all(str(folder) in e for e in errors.values())
    assert len([line for line in err.splitlines() if line.startswith("vitkit predict: skipping")]) == 2
    for record in (r for r in records if "error" not in r):
        probs = reference(weights, record["path"])
        top = probs.topk(3)
        assert record["indices"] == top.indices.tolist()
        assert record["classes"] == [NAMES[i] for i in top.indices]
        np.testing.assert_allclose(record["probs"], top.values.numpy(), atol=1e-5)
    assert "image/s" in err or "s/image" in err  # a progress bar for more than a few images


def test_csv_reads_back_with_dictreader(weights, folder, tmp_path, capsys) -> None:
    output = tmp_path / "preds.csv"
    code, _, _ = run([str(folder), "--weights", str(weights), "--output", str(output), "--topk", "2"], capsys)
    assert code == 0
    with output.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == IMAGES + 2
    assert list(rows[0]) == ["path", "error", "class_1", "index_1", "prob_1", "class_2", "index_2", "prob_2"]
    good = [row for row in rows if not row["error"]]
    assert len(good) == IMAGES and all(row["class_1"] in NAMES for row in good)
    for row in good:
        probs = reference(weights, row["path"])
        assert int(row["index_1"]) == int(probs.argmax()) and NAMES[int(row["index_1"])] == row["class_1"]
        assert abs(float(row["prob_1"]) - probs.max().item()) < 1e-5
    assert all(row["class_1"] == "" for row in rows if row["error"])


def test_batch_size_does_not_change_the_answers(weights, folder, tmp_path, capsys) -> None:
    outputs = []
    for batch_size in (1, 4):
        output = tmp_path / f"b{batch_size}.jsonl"
        args = [
            str(folder),
            "--weights",
            str(weights),
            "--output",
            str(output),
            "--batch-size",
            str(batch_size),
        ]
        assert run(args, capsys)[0] == 0
        outputs.append([json.loads(line) for line in output.read_text().splitlines()])
    one, four = outputs
    assert [r["path"] for r in one] == [r["path"] for r in four]
    for a, b in zip(one, four, strict=True):
        assert a.get("indices") == b.get("indices")
        np.testing.assert_allclose(a.get("probs", []), b.get("probs", []), atol=1e-5)


def test_a_named_file_that_fails_exits_1_after_writing_the_rest(weights, folder, tmp_path, capsys) -> None:
    output = tmp_path / "preds.jsonl"
    good, bad = folder / "img00.png", folder / "notes.jpg"
    missing = folder / "gone.png"
    code, _, err = run(
        [str(good), str(bad), str(missing), "--weights", str(weights), "--output", str(output)], capsys
    )
    assert code == 1
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert {r["path"]: "error" in r for r in records} == {
        str(good): False,
        str(bad): True,
        str(missing): True,
    }
    assert "image/s" not in err  # no progress bar for a few images


def test_labels_override_the_weights_names(weights, folder, tmp_path, capsys) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(name.upper() for name in NAMES))
    code, out, _ = run(
        [str(folder / "img00.png"), "--weights", str(weights), "--labels", str(labels)], capsys
    )
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 5 and {row[2] for row in rows} == {name.upper() for name in NAMES}
    code, out, _ = run([str(folder / "img00.png"), "--weights", str(weights)], capsys)
    assert {line.split()[2] for line in out.splitlines() if line.strip()[:1].isdigit()} == set(NAMES)


def test_an_unknown_output_extension_is_refused_before_any_work(weights, folder, tmp_path, capsys) -> None:
    code, _, err = run([str(folder), "--weights", str(weights), "--output", str(tmp_path / "p.txt")], capsys)
    assert code == 2 and "unknown output format '.txt'" in err
    assert not (tmp_path / "p.txt").exists()

"""A corpus of malformed inputs, generated here: images of every mode and every broken kind, recipes, weights.

Every case is a one-line error naming the file (or field) or a documented skip ("skipping PATH: reason"); never a
traceback, never a run directory or output left by a rejected command, never code run from a file.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import struct
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.data.decode import IMAGE_EXTENSIONS, ImageDecodeError
from vitkit.data.folder import FolderSource
from vitkit.data.pack import pack
from vitkit.data.shards import ShardSource
from vitkit.data.spec import open_source
from vitkit.inspect.images import read_images
from vitkit.storage import save_pretrained

DATA = Path(__file__).parent / "data" / "official_vit"
WEIGHTS = str(DATA / "A_params.npz")
RNG = np.random.default_rng(0)
HAS_DATASETS = importlib.util.find_spec("datasets") is not None
PIXELS = RNG.integers(0, 256, (24, 20, 3), dtype=np.uint8)
GREY = PIXELS[..., 0]


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb() -> bytes:
    """A 1-bit PNG of 13000 x 13000 (169 Mpixel) in a few KB."""
    row = b"\0" * (1 + 13000 // 8 + 1)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(13000)) + packer.flush()
    header = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 13000, 13000, 1, 0, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def good_images() -> dict[str, bytes]:
    """One file per mode and container a user may hand over."""
    palette = Image.fromarray(PIXELS).convert("P")
    transparent = Image.fromarray(GREY, "P")
    transparent.putpalette(list(range(256)) * 3)
    frames = [Image.fromarray(PIXELS), Image.fromarray(255 - PIXELS)]
    animated = io.BytesIO()
    frames[0].save(animated, "gif", save_all=True, append_images=frames[1:])
    exif = Image.Exif()
    exif[0x0112] = 8
    return {
        "rgb.png": encoded(Image.fromarray(PIXELS), "png"),
        "rgba.png": encoded(Image.fromarray(np.dstack([PIXELS, GREY]), "RGBA"), "png"),
        "grey.png": encoded(Image.fromarray(GREY, "L"), "png"),
        "grey_alpha.png": encoded(Image.fromarray(np.dstack([GREY, GREY]), "LA"), "png"),
        "one_bit.png": encoded(Image.fromarray(GREY > 127), "png"),
        "palette.png": encoded(palette, "png"),
        "palette_transparent.png": encoded(transparent, "png", transparency=0),
        "sixteen_bit.png": encoded(Image.fromarray(GREY.astype(np.uint16) * 257), "png"),
        "int32.tif": encoded(Image.fromarray(GREY.astype(np.int32) * 257, "I"), "tiff"),
        "float.tif": encoded(Image.fromarray(GREY.astype(np.float32) / 255, "F"), "tiff"),
        "cmyk.jpg": encoded(Image.fromarray(PIXELS).convert("CMYK"), "jpeg"),
        "photo.jpg": encoded(Image.fromarray(PIXELS), "jpeg", exif=exif),
        "grey.jpg": encoded(Image.fromarray(GREY, "L"), "jpeg"),
        "photo.webp": encoded(Image.fromarray(PIXELS), "webp"),
        "animated.gif": animated.getvalue(),
        "photo.bmp": encoded(Image.fromarray(PIXELS), "bmp"),
        "png_named.jpg": encoded(Image.fromarray(PIXELS), "png"),  # the content decides, not the name
    }


def broken_images() -> dict[str, bytes]:
    """One file per way an image can be broken or hostile."""
    png = encoded(Image.fromarray(PIXELS), "png")
    jpeg = encoded(Image.fromarray(PIXELS), "jpeg")
    nan = np.full((8, 8), 0.5, np.float32)
    nan[3, 3] = np.nan
    return {
        "empty.png": b"",
        "text.png": b"hello, not an image\n",
        "truncated.png": png[: len(png) // 2],
        "truncated.jpg": jpeg[: len(jpeg) // 3],
        "header_only.png": png[:33],
        "bad_crc.png": png[:20] + bytes([png[20] ^ 0xFF]) + png[21:],
        "nan.tif": encoded(Image.fromarray(nan, "F"), "tiff"),
        "inf.tif": encoded(Image.fromarray(np.full((8, 8), np.inf, np.float32), "F"), "tiff"),
        "bomb.png": bomb(),
        "postscript.eps": b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n",
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    root = tmp_path_factory.mktemp("corpus")
    good, broken = {}, {}
    for kind, files in ((good, good_images()), (broken, broken_images())):
        for name, data in files.items():
            (root / name).write_bytes(data)
            kind[name] = root / name
    return root, good, broken


def stderr_lines(err: str, command: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"vitkit {command}")]


def test_predict_classifies_every_good_image_and_skips_every_broken_one(corpus, capsys) -> None:
    root, good, broken = corpus
    assert cli.main(["predict", str(root), "--weights", WEIGHTS, "--topk", "1"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert all(str(path) in out for path in good.values())
    skipped = stderr_lines(err, "predict")
    assert sorted(skipped) == sorted(line for line in skipped if line.startswith("vitkit predict: skipping "))
    # A directory is scanned for image extensions (postscript.eps is not one); files named are all tried.
    assert sorted(line.split(": ")[1].removeprefix("skipping ") for line in skipped) == sorted(
        str(p) for p in broken.values() if p.suffix in IMAGE_EXTENSIONS
    )
    code = cli.main(["predict", *map(str, broken.values()), "--weights", WEIGHTS])
    err = capsys.readouterr().err
    assert (
        code == 2
        and "Traceback" not in err
        and stderr_lines(err, "predict")[-1].endswith(
            "error: no readable image among " + " ".join(map(str, broken.values()))
        )
    )


def test_every_reader_gives_the_same_pixels_and_skips_the_same_files(corpus, tmp_path) -> None:
    """inspect's reader and the ImageFolder source decode each file to the same pixels (one rule for alpha,
    palettes, 16-bit, float...) and skip the same files."""
    root, good, broken = corpus
    images, names, skipped = read_images([root])  # inspect's reader
    assert sorted(Path(n).name for n in names) == sorted(good)
    assert sorted(Path(s["path"]).name for s in skipped) == sorted(
        n for n in broken if Path(n).suffix in IMAGE_EXTENSIONS
    )
    assert all(image.dtype == torch.uint8 and image.shape[0] == 3 for image in images)
    inspected = {Path(name).name: image for name, image in zip(names, images, strict=True)}
    folder = tmp_path / "folder"
    for split in ("train", "test"):
        (folder / split / "all").mkdir(parents=True)
        for path in [*good.values(), *broken.values()]:
            os.symlink(path, folder / split / "all" / path.name)
    source = open_source(str(folder), "train")  # the ImageFolder source
    unreadable = []
    for index in range(len(source)):
        try:
            pixels = source.read(index)
            assert torch.equal(pixels, inspected[Path(source.name(index)).name])  # alpha onto white in both
        except ImageDecodeError as error:
            assert "\n" not in str(error) and str(error).startswith(source.name(index))
            unreadable.append(Path(source.name(index)).name)
    assert sorted(unreadable) == sorted(n for n in broken if Path(n).suffix in IMAGE_EXTENSIONS)


RECIPES = {
    "not_toml.toml": (b"[model\nname = ", "invalid TOML"),
    "binary.toml": (b"\xff\xfe\x00garbage", "invalid TOML"),
    "section_not_table.toml": (b"model = 3\n", "config entry 'model' must be a [section]"),
    "unknown_section.toml": (b"[modle]\nname = 'ViT-Ti/16'\n", "no section 'modle'"),
    "unknown_key.toml": (b"[optim]\nlearning_rate = 0.1\n", "unknown config key 'optim.learning_rate'"),
    "wrong_type.toml": (b"[train]\nsteps = 'many'\n", "train.steps must be of type int"),
    "zero_lr.toml": (b"[optim]\nlr = 0\n", "optim.lr must be in (0, inf)"),
    "zero_depth.toml": (b"[model]\nname = 'ViT-Ti/16'\ndepth = 0\n", "depth must be an integer >= 1, got 0"),
    "negative_width.toml": (
        b"[model]\nname = 'ViT-Ti/16'\nhidden_size = -3\n",
        "hidden_size must be an integer",
    ),
    "log_every_0.toml": (b"[train]\nlog_every = 0\n", "train.log_every must be >= 1, got 0"),
    "nan_decay.toml": (b"[train]\nema_decay = nan\n", "train.ema_decay"),
    "both_models.toml": (
        b"[model]\nname = 'ViT-Ti/16'\nweights = 'x.npz'\n",
        "set exactly one of model.name",
    ),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_malformed_recipe_is_one_line_and_leaves_no_run_directory(
    name, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")
    content, message = RECIPES[name]
    recipe = tmp_path / name
    recipe.write_bytes(content)
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(recipe), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vitkit train: error: ") and message in err, err
    assert not out.exists()


def malformed_weights(root: Path) -> dict[str, Path]:
    """Weights files and directories broken in every way a download or a user can break them."""
    model = vitkit.load_weights(WEIGHTS)
    good = root / "good"
    save_pretrained(model, good)
    data = (good / "model.safetensors").read_bytes()
    npz = Path(WEIGHTS).read_bytes()
    files = {
        "empty.safetensors": b"",
        "text.safetensors": b"not weights",
        "truncated.safetensors": data[: len(data) // 2],
        "truncated.npz": npz[: len(npz) // 2],
        "text.npz": b"PK\x03\x04 not a zip",
        # random bytes on which torch's unpickler raises UnpicklingError, IndexError (two kinds), KeyError,
        # EOFError and UnicodeDecodeError
        **{f"garbage{seed}.pth": random.Random(seed).randbytes(64) for seed in (0, 14, 20, 61, 81, 195)},
    }
    paths = {}
    for name, content in files.items():
        (root / name).write_bytes(content)
        paths[name] = root / name
    np.savez(root / "objects.npz", weights=np.array([{"a": 1}], dtype=object))
    paths["objects.npz"] = root / "objects.npz"
    np.savez(root / "unrelated.npz", x=np.zeros(3))
    paths["unrelated.npz"] = root / "unrelated.npz"
    marker = root / "code-ran"

    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"weight": RunsCode()}, root / "runs_code.pth")
    paths["runs_code.pth"] = root / "runs_code.pth"
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["head.weight"][0, 0] = float("nan")
    torch.save(state, root / "nan.pth")
    paths["nan.pth"] = root / "nan.pth"
    for name, config in (("list_config", "[1, 2]"), ("bad_json", "{"), ("unknown_field", '{"wings": 2}')):
        directory = root / name
        save_pretrained(model, directory)
        (directory / "config.json").write_text(config)
        paths[name] = directory
    (root / "no_config").mkdir()
    paths["no_config"] = root / "no_config"
    shape = root / "wrong_shape"
    save_pretrained(
        vitkit.create_model("ViT-Ti/16", img_size=32, patch_size=8, depth=1, num_classes=10), shape
    )
    (shape / "model.safetensors").write_bytes(data)
    paths["wrong_shape"] = shape
    return paths


def test_malformed_weights_are_one_line_and_run_no_code(tmp_path, capsys) -> None:
    image = tmp_path / "image.png"
    Image.fromarray(PIXELS).save(image)
    for name, path in malformed_weights(tmp_path).items():
        for argv, out in (
            (["predict", str(image), "--weights", str(path)], None),
            (
                ["convert", str(path), str(tmp_path / f"out-{name}"), "--to", "vitkit"],
                tmp_path / f"out-{name}",
            ),
        ):
            code = cli.main(argv)
            err = capsys.readouterr().err
            assert code == 2, (name, argv[0], err)
            lines = stderr_lines(err, argv[0])
            assert len(lines) == 1 and "Traceback" not in err and str(path) in lines[0], (name, err)
            assert out is None or not out.exists(), name
    assert not (tmp_path / "code-ran").exists()


@pytest.fixture(scope="module")
def sources(corpus, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The corpus's image files as an ImageFolder (train/good, train/broken, test/good) and packed with their
    bytes as they are into WebDataset shards and a Hugging Face dataset: the data.source of each."""
    root, good, broken = corpus
    base = tmp_path_factory.mktemp("sources")
    folder = base / "folder"
    for split, kind, paths in (("train", "good", good), ("train", "broken", broken), ("test", "good", good)):
        (folder / split / kind).mkdir(parents=True)
        for name, path in paths.items():
            os.symlink(path, folder / split / kind / name)
    specs = {"folder": f"folder:{folder}"}
    for fmt in ("wds", "hf") if HAS_DATASETS else ("wds",):
        pack(
            {split: FolderSource(folder, split) for split in ("train", "test")},
            base / fmt,
            fmt,
            shard_images=7,
        )
        specs[fmt] = f"{fmt}:{base / fmt}"
    return specs


def read_every_sample(source) -> tuple[dict[int, torch.Tensor], dict[int, str]]:
    """Each sample's pixels or one-line error, by index, read as training reads it."""
    if isinstance(source, ShardSource):
        encoded = [sample for shard in range(len(source.paths)) for sample in source.samples(shard)]
        reads = [
            (index, name, partial(source.decode, name, data, label, 3))
            for index, name, data, label in encoded
        ]
    else:
        reads = [(index, source.name(index), partial(source.read, index)) for index in range(len(source))]
    pixels, errors = {}, {}
    for index, name, read in reads:
        try:
            pixels[index] = read()
        except ImageDecodeError as error:
            assert "\n" not in str(error) and str(error).startswith(f"{name}: "), str(error)
            errors[index] = str(error)
    return pixels, errors


def test_every_data_source_reads_the_same_pixels_and_names_each_broken_image(sources, corpus) -> None:
    """folder:, wds: and hf: hold the same bytes in the same order: the same pixels, the same unreadable
    samples (each a one-line error naming the sample), nothing lost in packing."""
    _, good, broken = corpus
    folder = open_source(sources["folder"], "train")
    names = [Path(folder.name(index)).name for index in range(len(folder))]
    expected_broken = {index for index, name in enumerate(names) if name in broken}
    assert expected_broken and set(names) == {
        n for n in [*good, *broken] if Path(n).suffix in IMAGE_EXTENSIONS
    }
    pixels, errors = read_every_sample(folder)
    assert set(errors) == expected_broken
    for kind, spec in sources.items():
        got_pixels, got_errors = read_every_sample(open_source(spec, "train"))
        assert set(got_errors) == expected_broken, (kind, got_errors)
        assert got_pixels.keys() == pixels.keys() and all(
            torch.equal(got_pixels[i], pixels[i]) for i in pixels
        ), kind


def test_training_on_broken_data_stops_in_one_line_and_resumes_skipping(sources, tmp_path, capsys) -> None:
    """data.on_corrupt='stop' ends the run with one line naming an unreadable sample; the same run continues
    with --resume data.on_corrupt=skip, leaving the unreadable samples out and listing them in report.json."""
    run = tmp_path / "run"
    recipe = [
        "model.img_size=16",
        "model.patch_size=4",
        "model.in_chans=3",
        "train.batch_size=8",
        "optim.warmup_steps=0",
    ]
    argv = [
        "train",
        "--out",
        str(run),
        "--steps",
        "1",
        *TINY_RECIPE,
        *recipe,
        f"data.source={sources['wds']}",
    ]
    assert cli.main(argv) == 2
    lines = stderr_lines(capsys.readouterr().err, "train")
    assert len(lines) == 1 and "wds/train-000000.tar:" in lines[0] and "data.on_corrupt='skip'" in lines[0], (
        lines
    )
    assert cli.main(["train", "--out", str(run), "--resume", "data.on_corrupt=skip"]) == 0
    skipped = json.loads((run / "report.json").read_text())["skipped_images"]
    assert skipped and all("wds/train-" in e["image"] and "\n" not in e["image"] for e in skipped), skipped


def test_a_directory_of_another_kind_is_one_line_and_leaves_no_run_directory(
    sources, tmp_path, capsys
) -> None:
    folder = sources["folder"].removeprefix("folder:")
    (tmp_path / "empty").mkdir()
    cases = {
        f"wds:{folder}": "no WebDataset shards",
        f"folder:{tmp_path / 'empty'}": "needs the directories",
    }
    if HAS_DATASETS:
        cases[f"hf:{tmp_path / 'empty'}"] = str(tmp_path / "empty")
    for spec, message in cases.items():
        assert (
            cli.main(["train", "--out", str(tmp_path / "run"), *TINY_RECIPE, f"data.source={spec}"]) == 2
        ), spec
        lines = stderr_lines(capsys.readouterr().err, "train")
        assert len(lines) == 1 and message in lines[0], (spec, lines)
        assert not (tmp_path / "run").exists()

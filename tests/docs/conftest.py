"""The files the documentation's examples name, made for real: a tiny official-layout checkpoint, photos, and a
mirror of Google's bucket serving tiny checkpoints under the published names the examples load.

Each example page runs in a fresh copy of this workspace as its working directory, so `ViT-B_16.npz`,
`photo.jpg`, `photos/` and `configs/` resolve as they would in a user's checkout, and `ViT-B/16-i21k` downloads
from the local mirror ($VITKIT_WEIGHTS_BASE_URL) into a cache of the test's own.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit
from docs.documents import ROOT
from tiny import build_tiny_official_vit
from vitkit.cache import CACHE_ENV
from vitkit.weights import hub

PHOTO_CLASSES = ("cat", "dog")
# the published checkpoints the examples load by name, served tiny (their resolution, classes and patch size)
MIRRORED = ("ViT-B/16-i21k", "ViT-B/16-i21k-in1k-384")
PHOTOS_PER_CLASS = {"train": 4, "test": 2}


def write_photo(path: Path, seed: int) -> None:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(40, 48, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


def write_photos(root: Path, classes: tuple[str, ...]) -> None:
    """photos/train/<class>/ and photos/test/<class>/, a few small random JPEGs each."""
    for split, count in PHOTOS_PER_CLASS.items():
        for label, name in enumerate(classes):
            for index in range(count):
                write_photo(root / "photos" / split / name / f"{index}.jpg", 100 * label + index)


def write_workspace(root: Path) -> Path:
    # the examples load, resample and convert it as they would the real file
    vitkit.export_npz(build_tiny_official_vit(num_classes=1000), root / "ViT-B_16.npz")
    write_photo(root / "photo.jpg", 0)
    write_photos(root, PHOTO_CLASSES)
    (root / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def workspace_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workspace(tmp_path_factory.mktemp("doc_workspace"))


def write_mirror(root: Path) -> Path:
    """Tiny official-layout .npz files at the bucket's paths of the MIRRORED names: the resolution, classes and
    patch size of each published file, a width and depth thousands of times smaller."""
    for name in MIRRORED:
        entry = hub.find(name)
        assert entry is not None, name
        model = build_tiny_official_vit(img_size=entry.img_size, num_classes=entry.num_classes)
        (root / entry.file).parent.mkdir(parents=True, exist_ok=True)
        vitkit.export_npz(model, root / entry.file)
    return root


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(folder: Path) -> Iterator[str]:
    """The URL (no trailing slash) of a local HTTP server of `folder`'s files, in a thread, stopped afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(folder)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def weights_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a local HTTP server holding the tiny MIRRORED checkpoints in the bucket's layout."""
    with serving(write_mirror(tmp_path_factory.mktemp("weights_mirror"))) as url:
        yield url


def use_mirror(monkeypatch: pytest.MonkeyPatch, mirror: str, cache: Path | None = None) -> None:
    """Published names download from `mirror` (into `cache`, else the session's); the tiny files pass the check
    that a name's file holds its model as long as resolution, classes and patch size agree (width and depth are
    not compared)."""
    monkeypatch.setenv(hub.BASE_URL_ENV, mirror)
    if cache is not None:
        monkeypatch.setenv(CACHE_ENV, str(cache))
    monkeypatch.setattr(hub, "ARCHITECTURE_FIELDS", ("patch_size",))
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")  # the Fashion-MNIST subset shipped with vitkit: no download


@pytest.fixture
def doc_workspace(
    workspace_template: Path, weights_mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A fresh copy of the workspace, made the working directory."""
    directory = tmp_path / "workspace"
    shutil.copytree(workspace_template, directory, symlinks=True)
    monkeypatch.chdir(directory)
    use_mirror(monkeypatch, weights_mirror)
    return directory

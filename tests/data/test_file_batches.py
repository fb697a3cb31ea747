"""Inference's input pipeline: files decoded and resized in worker processes give exactly the pixels of
`eval_transform` in the main process (real photos of several sizes, modes and formats), in order, with each
unreadable file's error at its position."""

from pathlib import Path

import pytest
import sklearn.datasets
import torch
from PIL import Image

from vitkit.data.decode import decode_image
from vitkit.data.file_batches import FileChunks, decoding_workers, file_batches
from vitkit.data.transforms import eval_transform

SKLEARN = Path(sklearn.datasets.__file__).parent / "images"


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> list[Path]:
    """scikit-learn's two photos (JPEG, 640x427) and, cut from them, a portrait PNG, a grey JPEG, a small
    square and a palette GIF: the shapes and modes of everyday files."""
    folder = tmp_path_factory.mktemp("photos")
    china, flower = Image.open(SKLEARN / "china.jpg"), Image.open(SKLEARN / "flower.jpg")
    made = {
        "portrait.png": china.crop((100, 0, 300, 427)),
        "grey.jpg": flower.convert("L"),
        "square.png": flower.crop((200, 100, 261, 161)),
        "palette.gif": china.convert("P"),
    }
    for name, image in made.items():
        image.save(folder / name)
    return [SKLEARN / "china.jpg", SKLEARN / "flower.jpg", *(folder / name for name in made)]


@pytest.mark.parametrize("img_size, in_chans", [((224, 224), 3), ((32, 48), 1)])
def test_workers_give_the_pixels_of_the_eval_transform_bit_for_bit(photos, tmp_path, img_size, in_chans):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(photos[0].read_bytes()[:300])
    files = [*photos[:3], broken, *photos[3:]]
    expected = {
        i: eval_transform(decode_image(f)[None], img_size, in_chans)[0]
        for i, f in enumerate(files)
        if f != broken
    }
    batches = list(file_batches(FileChunks(files, 3, img_size, in_chans), workers=2))
    assert [b.positions for b in batches] == [[0, 1, 2], [4, 5], [6]] and list(batches[1].errors) == [3]
    assert "broken.jpg" in batches[1].errors[3]
    got = {p: pixels for b in batches for p, pixels in zip(b.positions, b.pixels, strict=True)}
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[p], expected[p]) for p in expected)
    in_process = list(file_batches(FileChunks(files, 3, img_size, in_chans), workers=0))
    assert all(torch.equal(a.pixels, b.pixels) for a, b in zip(in_process, batches, strict=True))


def test_one_batch_is_read_in_the_main_process_and_more_by_bounded_workers():
    assert decoding_workers(8, 8) == 0
    assert 1 <= decoding_workers(200, 8) <= 2

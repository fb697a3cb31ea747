"""Weights by URL, by name and by Hub id, through the download cache: a local HTTP server stands in for the
internet (no test reaches it), a pre-filled Hugging Face cache for the Hub."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from hub_cache import hub_snapshot
from vitkit import cli, create_model, export_npz, load_weights, to_timm
from vitkit.models import model_config
from vitkit.weights import cached_files, download, hub
from vitkit.weights.vitkit_state import infer_vit_config

from .conftest import etag

TINY = dict(img_size=28, num_classes=5, activation="gelu_tanh", layer_norm_eps=1e-6)
PATH = "/models/tiny.npz"


def npz_bytes(model: torch.nn.Module, tmp_path: Path) -> bytes:
    return export_npz(model, tmp_path / "export.npz").read_bytes()


@pytest.fixture
def tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    model = create_model("ViT-Mini/4", **TINY).eval()
    with torch.no_grad():
        model.head.weight.normal_()  # a head that says something
    return model


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(2, 3, 28, 28, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def served(file_server, tiny, tmp_path):
    file_server.files[PATH] = npz_bytes(tiny, tmp_path)
    return file_server


def ranges(server) -> list[str]:
    return [r for _, r in server.requests if r]


def test_a_url_loads_then_loads_from_the_cache_with_the_server_gone(served, tiny, images):
    url = served.url(PATH)
    with torch.no_grad():
        expected = tiny(images)
        first = load_weights(url)(images)
        served.shutdown()
        served.server_close()
        again = load_weights(url)(images)
    assert torch.allclose(first, expected, atol=1e-5) and torch.equal(first, again)
    assert len(served.requests) == 1
    cached = cached_files.cache_path(url)
    record = json.loads(cached_files.meta_path(cached).read_text())
    assert record["size"] == len(served.files[PATH]) == cached.stat().st_size
    assert record["sha256"] == cached_files.sha256_of(cached) and record["url"] == url


def test_an_interrupted_transfer_resumes_with_a_range_request(served, tiny, images):
    served.drop_once.add(PATH)
    path = download.fetch(served.url(PATH), progress=False)
    size = len(served.files[PATH])
    assert ranges(served) == [f"bytes={(size) // 2}-"]  # the first response broke off halfway
    assert path.read_bytes() == served.files[PATH]


def left_part(url: str, data: bytes, version: bytes | None) -> Path:
    """A .part file as an earlier, interrupted call leaves it: `data`, and the version it began (None: unknown)."""
    target = cached_files.cache_path(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    cached_files.part_path(target).write_bytes(data)
    if version is not None:
        record = {"validator": etag(version), "size": len(version)}
        cached_files.resume_path(target).write_text(json.dumps(record))
    return cached_files.part_path(target)


def test_a_part_file_left_by_an_earlier_call_is_resumed_if_it_is_of_the_same_version(served):
    url, data = served.url(PATH), served.files[PATH]
    part = left_part(url, data[:1000], data)
    path = download.fetch(url, progress=False)
    assert ranges(served) == ["bytes=1000-"] and served.headers_seen[0]["If-Range"] == etag(data)
    assert path.read_bytes() == data and not part.exists()
    assert not cached_files.resume_path(path).exists()
    left_part(
        served.url("/models/other.npz"), data[:1000], None
    )  # no version known: no proof it is the start
    served.files["/models/other.npz"] = data
    assert download.fetch(served.url("/models/other.npz"), progress=False).read_bytes() == data
    assert ranges(served) == ["bytes=1000-"]  # the second one was fetched whole


def test_a_server_without_ranges_sends_the_whole_file_again(served):
    url = served.url(PATH)
    left_part(url, b"x" * 1000, served.files[PATH])  # not even a prefix: kept only if the server resumes
    served.ranges = False
    assert download.fetch(url, progress=False).read_bytes() == served.files[PATH]


def test_a_part_file_longer_than_the_file_is_fetched_afresh(served):
    url, data = served.url(PATH), served.files[PATH]
    left_part(url, data + b"stale", data)  # the server answers its Range with 416
    assert download.fetch(url, progress=False).read_bytes() == data
    assert [r for _, r in served.requests] == [f"bytes={len(data) + 5}-", None]


def test_a_corrupted_cached_file_is_detected_and_fetched_again(served, tiny, images, capsys):
    url = served.url(PATH)
    path = download.fetch(url, progress=False)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    path.write_bytes(bytes(data))
    with torch.no_grad():
        reloaded = load_weights(url)(images)
        assert torch.allclose(reloaded, tiny(images), atol=1e-5)
    assert "does not match its recorded size and sha256" in capsys.readouterr().err
    assert len(served.requests) == 2 and path.read_bytes() == served.files[PATH]


def test_offline_a_cached_file_loads_and_a_missing_one_is_one_line(served, monkeypatch):
    url = served.url(PATH)
    download.fetch(url, progress=False)
    monkeypatch.setenv("VITKIT_OFFLINE", "1")
    load_weights(url)
    missing = served.url("/models/other.npz")
    with pytest.raises(FileNotFoundError) as error:
        load_weights(missing)
    message = str(error.value)
    assert "\n" not in message and missing in message and str(cached_files.cache_path(missing)) in message
    assert len(served.requests) == 1  # nothing asked offline


def test_a_404_and_a_silent_server_are_one_line_errors(served, monkeypatch, capsys):
    missing = served.url("/models/none.npz")
    assert cli.main(["weights", "get", missing]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"vitkit weights: error: {missing}: HTTP 404 Not Found (no such file there)"
    assert not cached_files.cache_path(missing).with_name("none.npz.part").exists()
    monkeypatch.setenv(download.TIMEOUT_ENV, "0.2")
    served.delay_s = 1.0
    with pytest.raises(
        ConnectionError, match=r"^http://127.0.0.1:\d+/models/tiny.npz: no answer within 0.2 s"
    ):
        download.fetch(served.url(PATH), progress=False)


def test_names_follow_the_mirror_and_a_wrong_file_there_is_refused(served, monkeypatch, capsys):
    entry = hub.find("vit-b/16-i21k")
    assert entry is not None and entry.name == "ViT-B/16-i21k"
    assert entry.official_url == "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"
    served.files["/mirror/imagenet21k/ViT-B_16.npz"] = served.files[PATH]  # not a ViT-B/16 at all
    monkeypatch.setenv(hub.BASE_URL_ENV, served.url("/mirror/"))
    assert entry.url == served.url("/mirror/imagenet21k/ViT-B_16.npz")
    with pytest.raises(
        ValueError, match=r"not the ViT-B/16-i21k checkpoint .* hidden_size 96 \(expected 768\)"
    ):
        load_weights("ViT-B/16-i21k")
    assert served.requests == [("/mirror/imagenet21k/ViT-B_16.npz", None)]
    assert (
        not entry.cache_path.exists() and not cached_files.part_path(entry.cache_path).exists()
    )  # not cached
    capsys.readouterr()
    assert cli.main(["weights", "get", "--quiet", "ViT-B/16-i21k"]) == 2  # checked by `weights get` as well
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vitkit weights: error: {entry.url}: not cached: the file received is not the ")
    assert "\n" not in err and not entry.cache_path.exists() and len(served.requests) == 2
    assert cli.main(["weights", "path", "ViT-B/16-i21k"]) == 0
    assert capsys.readouterr().out.strip() == str(entry.cache_path)


def test_the_table_holds_both_releases_with_their_configs():
    in1k = hub.find("ViT-B/16-i21k-in1k-384")
    assert in1k is not None and in1k.file == "imagenet21k+imagenet2012/ViT-B_16.npz"
    assert (in1k.img_size, in1k.num_classes, in1k.fine_tuning) == (384, 1000, "ImageNet-1k")
    assert in1k.official_url.endswith("/imagenet21k%2Bimagenet2012/ViT-B_16.npz")
    augreg = hub.find("ViT-B/16-augreg-i21k-in1k-224")
    assert augreg is not None and augreg.file == (
        "augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224.npz"
    )
    assert hub.find("ViT-H/14-i21k") is not None and hub.find("ViT-H/14-i21k-in1k-384") is None
    assert hub.default_for("vit_base_patch16_224").name == "ViT-B/16-i21k"
    assert hub.default_for("ViT-S/16").name == "ViT-S/16-augreg-i21k"
    with pytest.raises(ValueError, match="no published weights for model 'ViT-Mini/4'"):
        hub.default_for("ViT-Mini/4")


def test_create_model_with_pretrained_weights_for_fine_tuning(served, tiny, images):
    url = served.url(PATH)
    model = create_model("ViT-Mini/4", pretrained=url, num_classes=3, img_size=32)
    assert model.config.num_classes == 3 and model.config.img_size == (32, 32)
    assert not model.head.weight.any()  # zero-initialised head (§3.2)
    assert torch.equal(model.blocks[0].attn.qkv.weight, tiny.blocks[0].attn.qkv.weight)
    with pytest.raises(ValueError, match=r"holds no ViT-S/16 model: hidden_size 96 \(the registry's 384\)"):
        create_model("ViT-S/16", pretrained=url)


def test_a_hub_id_loads_from_a_prefilled_cache_offline(tmp_path, monkeypatch, images):
    constants = pytest.importorskip("huggingface_hub.constants")
    torch.manual_seed(0)
    model = create_model("ViT-Mini/4", img_size=28, num_classes=5, layer_norm_eps=1e-6).eval()
    timm_model = to_timm(model)
    state = {k: v.contiguous() for k, v in timm_model.state_dict().items()}
    config = {"architecture": "vit_mini_patch4_28", "num_classes": 5, "model_args": {"num_heads": 3},
              "pretrained_cfg": {"input_size": [3, 28, 28]}}  # fmt: skip
    pickled = io.BytesIO()
    torch.save(state, pickled)
    hub_snapshot(
        tmp_path,
        "timm/mini.safetensors",
        {"model.safetensors": save(state), "config.json": json.dumps(config).encode()},
    )
    hub_snapshot(
        tmp_path,
        "timm/mini.pickle",
        {"pytorch_model.bin": pickled.getvalue(), "config.json": json.dumps(config).encode()},
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with torch.no_grad():
        expected = timm_model(images)
        for repo in ("timm/mini.safetensors", "timm/mini.pickle"):
            assert torch.allclose(load_weights(f"hf-hub:{repo}")(images), expected, atol=1e-5), repo
    with pytest.raises(FileNotFoundError, match=r"^hf-hub:timm/absent: not in the Hugging Face cache"):
        load_weights("hf-hub:timm/absent")


def test_the_progress_bar_shows_the_bytes(served, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    download.fetch(served.url(PATH))
    assert "tiny.npz" in err.getvalue() and "100%" in err.getvalue()


@pytest.mark.parametrize("entry", hub.PRETRAINED.values(), ids=lambda e: e.name)
def test_every_name_accepts_a_file_of_its_model_only(entry):
    """What a file of the named model loads as (its config inferred from tensor shapes, as for the real file,
    here of a model built on the meta device) passes the name's check; one of other classes does not."""
    heads = model_config(entry.model).num_heads

    def loaded(num_classes: int):
        model = create_model(entry.model, img_size=entry.img_size, num_classes=num_classes, device="meta")
        return infer_vit_config(model.state_dict(), entry.name, num_heads=heads)

    hub.check_named(entry, loaded(entry.num_classes), {})
    with pytest.raises(ValueError, match=f"num_classes 7 \\(expected {entry.num_classes}\\)"):
        hub.check_named(entry, loaded(7), {})


def test_the_weights_command_lists_gets_and_locates(served, capsys):
    assert cli.main(["weights", "list", "vit-b/16-i21k*"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [
        "ViT-B/16-i21k",
        "ViT-B/16-i21k-in1k-384",
        "ViT-B/16-i21k-in1k-224",
    ]
    assert rows[1].split()[1:] == [
        "ViT-B/16",
        "ImageNet-21k",
        "ImageNet-1k",
        "384",
        "1000",
        "apache-2.0",
        "vit_models",
    ]
    url = served.url(PATH)
    assert cli.main(["weights", "get", "--quiet", url]) == 0
    assert (
        capsys.readouterr().out.strip() == str(cached_files.cache_path(url))
        and cached_files.cache_path(url).is_file()
    )
    assert cli.main(["weights", "list", "nothing*"]) == 2
    assert "no checkpoint name matches 'nothing*'" in capsys.readouterr().err
    assert cli.main(["weights", "get", "no-such-name"]) == 2
    assert "no-such-name: not a checkpoint name" in capsys.readouterr().err


def test_two_fetches_of_one_file_take_turns(served):
    served.delay_s = 0.3  # the first is still downloading when the second asks
    url = served.url(PATH)
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: download.fetch(url, progress=False), range(2)))
    assert paths[0] == paths[1] and paths[0].read_bytes() == served.files[PATH]
    assert len(served.requests) == 1  # the second found the first's file

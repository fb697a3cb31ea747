"""The later families on the Hugging Face Hub: `hf-hub:timm/...` ids and the checkpoint names of `vitkit weights
list` load from timm's uploads as timm's config.json describes them (architecture, normalisation), offline from a
cache laid out as huggingface_hub leaves it."""

from __future__ import annotations

import pytest
import torch

from hub_cache import timm_upload
from vitkit import cli, create_model, load_weights
from vitkit.models.registry import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD
from vitkit.weights import hub

timm = pytest.importorskip("timm")
pytest.importorskip("huggingface_hub")
TINY = dict(depth=2, embed_dim=32, num_heads=2)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def tiny_timm(architecture: str, img_size: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model(architecture, pretrained=False, img_size=img_size, **TINY).eval()
    with torch.no_grad():  # LayerScale and the class token far from their init: a wrong reading shows
        for name, p in model.named_parameters():
            if name.endswith("gamma") or "token" in name:
                p.normal_()
    return model


@pytest.mark.parametrize(
    "repo, architecture",
    [
        ("timm/vit_base_patch16_clip_quickgelu_224.openai", "vit_base_patch16_clip_quickgelu_224"),
        # timm's upload of OpenAI's weights names the GELU architecture; the name's model says QuickGELU
        ("timm/vit_base_patch16_clip_224.openai", "vit_base_patch16_clip_quickgelu_224"),
    ],
)
def test_openai_clip_loads_with_quickgelu_and_clips_normalisation(hub_cache, repo, architecture):
    model = tiny_timm(architecture, 32)
    timm_upload(hub_cache, repo, model, num_heads=2)
    if "quickgelu" not in repo:  # the upload's config.json as timm writes it for these weights
        config = next(hub_cache.glob("models--*/snapshots/*/config.json"))
        config.write_text(config.read_text().replace("clip_quickgelu_224", "clip_224"))
    loaded = load_weights(f"hf-hub:{repo}")
    assert loaded.config.activation == "quick_gelu" and loaded.config.layer_norm_eps == 1e-5
    assert loaded.config.mean_std == (CLIP_MEAN, CLIP_STD)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_dinov2_id_reads_its_features_as_dinov2_does(hub_cache):
    model = tiny_timm("vit_base_patch14_reg4_dinov2", 56)
    timm_upload(hub_cache, "timm/vit_base_patch14_reg4_dinov2.lvd142m", model, num_heads=2)
    loaded = load_weights("hf-hub:timm/vit_base_patch14_reg4_dinov2.lvd142m")
    config = loaded.config
    assert (config.probe_classifier, config.num_reg_tokens, config.prefix_pos_embed) == (
        "token_gap",
        4,
        False,
    )
    assert config.mean_std == (IMAGENET_MEAN, IMAGENET_STD) and config.img_size == (56, 56)
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, pre_logits=True), model(x), rtol=1e-5, atol=1e-5)


def test_every_family_name_has_its_hub_id_licence_and_resolution():
    dinov2 = hub.find("dinov2-b/14-reg4-lvd142m")
    assert dinov2 is not None and dinov2.source == "hf-hub:timm/vit_base_patch14_reg4_dinov2.lvd142m"
    assert (dinov2.model, dinov2.img_size, dinov2.licence) == ("DINOv2-B/14-reg4", 518, "apache-2.0")
    clip = hub.find("CLIP-B/32-openai")
    assert (
        clip is not None and clip.hub_id == "timm/vit_base_patch32_clip_224.openai" and clip.licence == "mit"
    )
    siglip2 = hub.find("SigLIP2-B/16-webli")
    assert siglip2 is not None and siglip2.hub_id == "timm/vit_base_patch16_siglip_224.v2_webli"
    assert hub.default_for("deit3_base_patch16_224").hub_id == "timm/deit3_base_patch16_224.fb_in22k_ft_in1k"
    assert hub.default_for("DINOv2-S/14").name == "DINOv2-S/14-lvd142m"


@pytest.mark.slow
def test_a_family_name_loads_its_hub_weights_by_name_and_by_pretrained(hub_cache, capsys):
    """DINOv2-S/14 at full size (22M random parameters) under its real hub id: the name, create_model's
    pretrained=True and `vitkit weights` find it in the Hub cache."""
    torch.manual_seed(0)
    with torch.device("meta"):  # timm's own init of 22M parameters takes seconds: random normal ones instead
        model = timm.create_model("vit_small_patch14_dinov2", pretrained=False).eval()
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.02)
    timm_upload(hub_cache, "timm/vit_small_patch14_dinov2.lvd142m", model)
    by_name = load_weights("DINOv2-S/14-lvd142m")
    pretrained = create_model("DINOv2-S/14", pretrained=True)
    for loaded in (by_name, pretrained):
        assert loaded.config.probe_classifier == "token_gap" and loaded.config.img_size == (518, 518)
        assert loaded.config.mean_std == (IMAGENET_MEAN, IMAGENET_STD) and loaded.config.num_classes == 0
        assert torch.equal(loaded.blocks[11].ls2.gamma, model.blocks[11].ls2.gamma)
    assert cli.main(["weights", "list", "DINOv2-S/14*"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows[0].split()[0] == "DINOv2-S/14-lvd142m" and rows[0].split()[-1] == "yes"  # cached
    assert rows[1].split()[-1] != "yes"  # the reg4 weights are not
    assert cli.main(["weights", "path", "DINOv2-S/14-lvd142m"]) == 0
    assert capsys.readouterr().out.strip().endswith("model.safetensors")

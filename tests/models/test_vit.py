"""The Vision Transformer: Eq. 1-4, both attention paths, input checks, init, head and training switches."""

import functools
import math

import pytest
import torch

import vitkit
from grad_checkpointing import assert_checkpointing_recomputes
from tiny import TINY_VIT_GRID_CONFIG
from vitkit.models.posemb import LearnedPositionEmbedding, resample_position_embedding
from vitkit.models.vit import PatchEmbed

POS_EMBEDS = ["none", "learned", "learned_2d", "sincos", "relative"]


@pytest.fixture
def tiny(tiny_vit):
    """The shared tiny ViT at this file's size: 32 px in 8x8 patches, width 48 in 3 heads, 10 classes."""
    return functools.partial(tiny_vit, **TINY_VIT_GRID_CONFIG)


def randomise_head(model):
    torch.nn.init.normal_(model.head.weight)
    torch.nn.init.normal_(model.head.bias)
    return model


@pytest.mark.parametrize("pos_embed", POS_EMBEDS)
@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_sdpa_and_explicit_attention_agree(pos_embed, classifier, tiny):
    model = randomise_head(tiny(pos_embed=pos_embed, classifier=classifier)).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fused = model(x)
        encoded, maps = model.forward_attention(x)
        explicit = model.forward_head(encoded)
    tokens = 16 + (classifier == "token")
    assert len(maps) == 2 and maps[0].shape == (2, 3, tokens, tokens)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 3, tokens))
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_logits_take_the_last_layer_for_the_class_token_alone(checkpointing, tiny):
    """Eq. 4 reads z_L^0 only: the logits and every gradient match the path that encodes every token, while the
    last layer's MLP sees one token per image."""
    model = randomise_head(tiny(pos_embed="relative"))
    model.set_grad_checkpointing(checkpointing)
    tokens_seen = []
    model.blocks[-1].mlp.register_forward_hook(lambda module, args, out: tokens_seen.append(args[0].shape[1]))
    x = torch.randn(2, 3, 32, 32)
    params = list(model.parameters())
    logits = model(x)
    grads = torch.autograd.grad(logits.square().sum(), params)
    every_token = model.forward_head(model.forward_features(x))
    expected_grads = torch.autograd.grad(every_token.square().sum(), params)
    assert tokens_seen[0] == 1 and tokens_seen[-1] == 17
    torch.testing.assert_close(logits, every_token)
    for grad, expected in zip(grads, expected_grads, strict=True):  # float32 rounding of gradients up to ~1e4
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6 * expected.abs().max().item())


def test_attention_weights_reproduce_the_layer_output(tiny):
    """The explicit maps are the real probabilities: softmax(q k^T / sqrt(d)) recomputed by hand matches."""
    model = tiny().eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        tokens, _ = model.embed(x)
        block = model.blocks[0]
        _, weights = block.attn(block.norm1(tokens), need_weights=True)
        q, k, _ = block.attn.qkv(block.norm1(tokens)).view(1, 17, 3, 3, 16).permute(2, 0, 3, 1, 4)
        expected = (q @ k.transpose(-2, -1) / math.sqrt(16)).softmax(-1)
    torch.testing.assert_close(weights, expected)


@pytest.mark.parametrize(
    ("channels", "size", "patch"), [(3, (32, 32), (8, 8)), (1, (30, 27), (4, 4)), (2, (12, 20), (3, 5))]
)
def test_patch_embedding_is_the_strided_convolution_of_its_kernel(channels, size, patch):
    """The product over flattened patches equals the convolution of E's kernel with stride P, remainder pixels
    left out, values and gradients (of the input too: a hybrid's feature map has one)."""
    torch.manual_seed(0)
    embed = PatchEmbed(channels, 16, patch)
    x = torch.randn(2, channels, *size, requires_grad=True)
    tokens, grid = embed(x)
    conv = embed.proj(x)
    assert grid == tuple(conv.shape[-2:])
    torch.testing.assert_close(tokens, conv.flatten(2).transpose(1, 2), rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(tokens)
    ours = torch.autograd.grad(tokens, (x, embed.proj.weight, embed.proj.bias), upstream)
    theirs = torch.autograd.grad(
        conv, (x, embed.proj.weight, embed.proj.bias), upstream.transpose(1, 2).unflatten(2, grid)
    )
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_forward_shapes_and_pre_logits(tiny):
    model = tiny(representation_size=24).eval()
    x = torch.randn(3, 3, 32, 32)
    encoded = model.forward_features(x)
    assert encoded.shape == (3, 17, 48)
    assert model.forward_head(encoded, pre_logits=True).shape == (3, 24)
    assert model(x).shape == (3, 10)
    assert model.forward_head(encoded, pre_logits=True).abs().max() <= 1  # tanh


def test_gap_pools_the_mean_of_normalised_tokens(tiny):
    model = randomise_head(tiny(classifier="gap")).eval()
    x = torch.randn(2, 3, 32, 32)
    encoded = model.forward_features(x)
    assert encoded.shape == (2, 16, 48) and model.cls_token is None
    torch.testing.assert_close(model(x), model.head(encoded.mean(1)))


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 1, 32, 32), r"expected input \[B, 3, H, W\], got \[2, 1, 32, 32\]"),
        ((2, 3, 30, 32), r"input size \(30, 32\) is not divisible by the patch size 8"),
        ((2, 3, 40, 40), r"differs from the model's img_size \(32, 32\)"),
    ],
)
def test_bad_input_names_expected_and_actual(shape, message, tiny):
    with pytest.raises(ValueError, match=message):
        tiny()(torch.randn(*shape))


def test_dynamic_img_size_resamples_on_the_fly(tiny):
    model = randomise_head(tiny(dynamic_img_size=True)).eval()
    out = model(torch.randn(2, 3, 48, 64))
    assert out.shape == (2, 10)
    table = resample_position_embedding(model.pos_embed.weight, 1, (4, 4), (6, 8))
    x = torch.zeros(1, 49, 48)
    torch.testing.assert_close(model.pos_embed(x, (6, 8)), table.expand(1, -1, -1))


def test_config_errors_are_clear(tiny):
    with pytest.raises(ValueError, match="hidden_size 50 must be divisible by num_heads 3"):
        tiny(hidden_size=50)
    with pytest.raises(ValueError, match="pos_embed must be one of"):
        tiny(pos_embed="rotary")
    with pytest.raises(ValueError, match="img_size height 36 must be divisible by the input stride 8"):
        tiny(img_size=(36, 32))
    with pytest.raises(ValueError, match=r"unknown ViTConfig field\(s\) \['hiden_size'\]"):
        vitkit.create_model("ViT-Ti/16", hiden_size=3)
    with pytest.raises(ValueError, match="unknown model 'ViT-X/16'"):
        vitkit.create_model("ViT-X/16")


def test_official_initialisation():
    model = vitkit.create_model("ViT-S/16", num_classes=10, representation_size=384)
    assert torch.count_nonzero(model.cls_token) == 0
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    assert model.pos_embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    block = model.blocks[0]
    assert block.mlp.fc1.bias.std().item() == pytest.approx(1e-6, rel=0.2)
    assert torch.count_nonzero(block.attn.qkv.bias) == 0
    bound_qkv = math.sqrt(6 / (384 + 384))  # xavier as if q, k, v were separate D x D kernels
    assert block.attn.qkv.weight.abs().max() <= bound_qkv
    assert block.attn.qkv.weight.abs().max() > 0.95 * bound_qkv
    assert block.mlp.fc1.weight.abs().max() <= math.sqrt(6 / (384 + 1536))
    fan_in = 3 * 16 * 16  # lecun normal: std sqrt(1 / fan_in), truncated at 2 std
    assert model.patch_embed.proj.weight.std().item() == pytest.approx(math.sqrt(1 / fan_in), rel=0.05)
    assert model.pre_logits.fc.weight.std().item() == pytest.approx(math.sqrt(1 / 384), rel=0.05)


def test_reset_classifier_is_zero_initialised(tiny):
    model = randomise_head(tiny())
    model.reset_classifier(5)
    assert model.head.weight.shape == (5, 48) and model.config.num_classes == 5
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    model.reset_classifier(0)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 48)


def test_no_weight_decay_names_biases_norms_posemb_and_cls(tiny):
    names = tiny().no_weight_decay()
    assert {"cls_token", "pos_embed.weight", "norm.weight", "blocks.0.attn.qkv.bias", "head.bias"} <= names
    assert (
        not {"blocks.0.attn.qkv.weight", "blocks.1.mlp.fc1.weight", "head.weight", "patch_embed.proj.weight"}
        & names
    )


def test_stochastic_depth_follows_the_linear_rule(tiny):
    model = tiny(depth=5, drop_path=0.2)
    rates = [getattr(b.drop_path, "p", 0.0) for b in model.blocks]  # rate 0: the identity
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert isinstance(model.blocks[0].drop_path, torch.nn.Identity)


def test_dropout_is_active_only_in_training(tiny):
    model = tiny(dropout=0.5, attention_dropout=0.5)
    randomise_head(model)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_gradient_checkpointing_recomputes_blocks_and_keeps_gradients(tiny):
    model = randomise_head(tiny())
    assert_checkpointing_recomputes(model, torch.randn(2, 3, 32, 32), list(model.blocks))


@pytest.mark.slow
@pytest.mark.parametrize("pos_embed", POS_EMBEDS)
def test_each_position_embedding_trains(pos_embed, tiny):
    torch.manual_seed(0)
    x = torch.randn(16, 3, 32, 32)
    y = torch.randint(0, 10, (16,))
    model = tiny(pos_embed=pos_embed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    position_params = [p for n, p in model.named_parameters() if "pos_embed" in n or "rel_pos" in n]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in position_params)


def test_learned_position_embedding_resamples_on_load(tiny):
    small, large = tiny(), tiny(img_size=48)
    large.load_state_dict(small.state_dict())
    assert isinstance(large.pos_embed, LearnedPositionEmbedding)
    torch.testing.assert_close(large.pos_embed.weight[:, 0], small.pos_embed.weight[:, 0])  # class token kept
    assert large.pos_embed.weight.shape == (1, 37, 48)


@pytest.mark.slow
def test_torch_compile_runs_on_cpu(tiny):
    model = randomise_head(tiny()).eval()
    x = torch.randn(2, 3, 32, 32)
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)

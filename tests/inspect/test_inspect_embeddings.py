"""Fig. 7 left and centre: filter principal components against numpy's SVD, position-embedding similarity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitkit.inspect import filter_components, position_embedding_table, position_similarity
from vitkit.inspect.figures import component_image


@pytest.mark.parametrize("shape,k", [((40, 3, 4, 4), 28), ((10, 1, 3, 3), 28), ((64, 3, 2, 2), 5)])
def test_filter_components_equal_numpy_svd(shape, k):
    rng = np.random.default_rng(0)
    w = rng.normal(size=shape) * np.linspace(0.1, 2.0, int(np.prod(shape[1:]))).reshape(
        shape[1:]
    )  # distinct variances
    comps, ratio = filter_components(torch.from_numpy(w).float(), k)
    flat = w.astype(np.float32).astype(np.float64).reshape(shape[0], -1)
    centred = flat - flat.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    k_eff = min(k, vt.shape[0])
    assert comps.shape == (k_eff, *shape[1:])
    got = comps.reshape(k_eff, -1).numpy()
    for i in range(k_eff):
        if s[i] < 1e-9 * s[0]:
            continue  # null space of the centred matrix: any basis is right
        sign = np.sign(got[i] @ vt[i])
        np.testing.assert_allclose(got[i], sign * vt[i], atol=1e-8)
        assert got[i][np.abs(got[i]).argmax()] > 0  # the sign convention
    np.testing.assert_allclose(ratio.numpy(), (s**2 / (s**2).sum())[:k_eff], atol=1e-10)


def test_component_images():
    assert component_image(np.random.rand(3, 4, 4)).shape == (4, 4, 3)
    assert component_image(np.random.rand(1, 4, 4)).shape == (4, 4)
    img = component_image(np.random.rand(3, 4, 4))
    assert img.min() == 0 and img.max() == 1


def test_learned_1d_similarity_excludes_class_token(tiny_vit):
    model = tiny_vit()
    table, grid = position_embedding_table(model)
    assert grid == (4, 4) and table.shape == (16, 32)
    assert torch.equal(table, model.pos_embed.weight[0, 1:].detach())
    sim = position_similarity(model)
    assert sim.shape == (4, 4, 4, 4)
    diag = torch.stack([sim[r, c, r, c] for r in range(4) for c in range(4)])
    assert torch.allclose(diag, torch.ones(16, dtype=torch.float64))
    assert torch.allclose(sim.reshape(16, 16), sim.reshape(16, 16).T)


def test_learned_2d_table_matches_what_the_model_adds(tiny_vit):
    model = tiny_vit(pos_embed="learned_2d", classifier="gap")
    table, _ = position_embedding_table(model)
    added = model.pos_embed(torch.zeros(1, 16, 32), (4, 4))[0]
    assert torch.allclose(table, added)
    assert position_similarity(model).shape == (4, 4, 4, 4)


def test_sincos_is_drawn_and_none_relative_are_not(tiny_vit):
    sincos = tiny_vit(pos_embed="sincos")
    table, _ = position_embedding_table(sincos)
    assert torch.allclose(table, sincos.pos_embed.table((4, 4), torch.device("cpu"), torch.float32)[0, 1:])
    assert position_similarity(tiny_vit(pos_embed="none")) is None
    assert position_similarity(tiny_vit(pos_embed="relative")) is None

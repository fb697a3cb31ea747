"""Position-embedding resampling (§3.2) against scipy, and the 2-D kinds of Appendix D.4."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from vitkit.models.posemb import (
    Learned2dPositionEmbedding,
    SinCos2dPositionEmbedding,
    resample_grid,
    resample_position_embedding,
)


@pytest.mark.parametrize(
    "old, new", [((14, 14), (24, 24)), ((14, 14), (24, 32)), ((24, 32), (14, 14)), ((4, 6), (7, 3))]
)
def test_bilinear_resample_equals_scipy_zoom_order_1(old, new):
    grid = torch.randn(*old, 8, dtype=torch.float64)
    expected = ndimage.zoom(grid.numpy(), (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert expected.shape[:2] == new
    np.testing.assert_allclose(resample_grid(grid, new).numpy(), expected, atol=1e-12)


def test_class_token_row_is_kept_and_grid_rows_resampled():
    posemb = torch.randn(1, 1 + 4 * 6, 5)
    out = resample_position_embedding(posemb, 1, (4, 6), (8, 9))
    assert out.shape == (1, 1 + 72, 5)
    torch.testing.assert_close(out[:, 0], posemb[:, 0])
    torch.testing.assert_close(
        out[0, 1:].reshape(8, 9, 5)[[0, -1]][:, [0, -1]], posemb[0, 1:].reshape(4, 6, 5)[[0, -1]][:, [0, -1]]
    )  # corners aligned


def test_bicubic_is_available_and_different():
    grid = torch.randn(5, 5, 3)
    assert not torch.allclose(resample_grid(grid, (9, 9), "bicubic"), resample_grid(grid, (9, 9)))
    with pytest.raises(ValueError, match="'bilinear' or 'bicubic'"):
        resample_grid(grid, (9, 9), "nearest")


def test_wrong_table_size_is_named():
    with pytest.raises(
        ValueError, match=r"does not fit grid \(4, 4\) with 1 prefix token\(s\): expected \[1, 17, D\]"
    ):
        resample_position_embedding(torch.randn(1, 20, 8), 1, (4, 4), (6, 6))


def test_learned_2d_concatenates_x_and_y_tables():
    pe = Learned2dPositionEmbedding(1, (3, 4), 8)
    out = pe(torch.zeros(1, 13, 8), (3, 4))
    patch = out[0, 1:].reshape(3, 4, 8)
    torch.testing.assert_close(patch[2, 1], torch.cat([pe.col[1], pe.row[2]]))
    torch.testing.assert_close(out[0, 0], pe.prefix[0, 0])


def test_sincos_is_fixed_and_distinguishes_positions():
    pe = SinCos2dPositionEmbedding(1, 16)
    table = pe.table((4, 4), torch.device("cpu"), torch.float32)[0]
    assert not list(pe.parameters())
    assert torch.count_nonzero(table[0]) == 0
    distances = torch.cdist(table[1:], table[1:])
    assert distances[~torch.eye(16, dtype=torch.bool)].min() > 0.1

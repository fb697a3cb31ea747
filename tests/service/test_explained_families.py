"""The service's explanation (Fig. 6's rollout beside the probabilities) for today's families: registers left
out of the patch map, 'map' and 'token_gap' heads explained as inspect explains them."""

from __future__ import annotations

import pytest
import torch

from families import build_tiny_family
from vitkit.inspect import rollout_masks
from vitkit.service.served_model import explained


@pytest.mark.parametrize(
    "kind, overrides", [("dinov2_reg", {}), ("dinov2_reg", {"classifier": "token_gap"}), ("siglip", {})]
)
def test_explanation_is_the_inspected_rollout(kind, overrides):
    model = build_tiny_family(kind, **overrides)
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        result = explained(model, image)
        torch.testing.assert_close(result.probs, model(image[None]).softmax(-1)[0])
    torch.testing.assert_close(result.rollout, rollout_masks(model, image[None])[0].float())

"""The exact McNemar test against scipy's binomial test, and predictions against the model's own logits."""

import pytest
import torch
from scipy.stats import binomtest

from vitkit.data import ImageDataset, eval_transform
from vitkit.evaluation.paired import mcnemar_p_value, paired_test, predictions
from vitkit.precision import choose_precision


@pytest.mark.parametrize(("only_first", "only_second"), [(0, 0), (0, 1), (3, 3), (7, 2), (40, 61), (0, 30)])
def test_mcnemar_is_scipys_two_sided_binomial_test(only_first, only_second):
    n = only_first + only_second
    expected = binomtest(only_first, n).pvalue if n else 1.0
    assert mcnemar_p_value(only_first, only_second) == pytest.approx(expected, rel=1e-12)


def test_paired_test_counts_the_discordant_images():
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    first = torch.tensor([0, 1, 2, 0, 0, 5])  # right on 0, 1, 2, 5
    second = torch.tensor([0, 0, 2, 3, 4, 0])  # right on 0, 2, 3, 4
    result = paired_test(first, second, labels)
    assert (result.only_first, result.only_second) == (2, 2)
    assert result.first_top1 == result.second_top1 == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match=r"three \[N\] tensors of one length"):
        paired_test(first, second[:3], labels)


def test_predictions_are_the_argmax_of_the_models_logits(tiny_vit):
    model = tiny_vit(img_size=32, patch_size=8, in_chans=1, num_classes=4)
    images = torch.randint(0, 256, (7, 1, 28, 28), dtype=torch.uint8)
    dataset = ImageDataset(images, torch.zeros(7, dtype=torch.long), list("abcd"), "random")
    with torch.no_grad():
        expected = model(eval_transform(images, 32, 1)).argmax(-1)
    assert torch.equal(predictions(model, dataset, choose_precision("fp32", "cpu"), batch_size=3), expected)

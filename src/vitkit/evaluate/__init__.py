"""Evaluation of trained classifiers: accuracy, loss and confusion matrices."""

from vitkit.evaluate.accuracy import Accuracy, evaluate

__all__ = ["Accuracy", "evaluate"]

"""Evaluation of trained classifiers: accuracy, loss and confusion matrices.

`evaluate_model(model, dataset)` measures a model in memory; `vitkit.evaluate(weights, ...)` (vitkit.api) evaluates
weights or a run directory on its own data, as `vitkit eval` does.
"""

from vitkit.evaluation.accuracy import Accuracy, evaluate_model

__all__ = ["Accuracy", "evaluate_model"]

"""Evaluation of trained classifiers: accuracy, loss and confusion matrices.

Called, the package is the Python API of `vitkit eval`: `vitkit.evaluate(weights, data=None, split=None, ...)`
is vitkit.evaluate.weights.evaluate_weights (a run directory on its own data), while
`vitkit.evaluate.evaluate(model, dataset)` measures a model in memory.
"""

from vitkit.callable_package import make_callable
from vitkit.evaluate.accuracy import Accuracy, evaluate

__all__ = ["Accuracy", "evaluate"]


make_callable(__name__, "vitkit.evaluate.weights:evaluate_weights")

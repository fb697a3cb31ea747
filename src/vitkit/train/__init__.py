"""Training and fine-tuning: one trainer, its optimizers, objectives, averaging, checkpoints and reports.

Called, the package is the Python API: `vitkit.train(recipe, out=..., **sections)` is vitkit.train.api.train, so
`vitkit.train` stays the package its modules live in (`from vitkit.train.recipe import RunConfig`).
"""

from vitkit.callable_package import make_callable
from vitkit.train.step import NonFiniteLoss
from vitkit.train.trainer import train

__all__ = ["NonFiniteLoss", "train"]


make_callable(__name__, "vitkit.train.api:train")

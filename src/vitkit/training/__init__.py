"""Training and fine-tuning: one trainer, its optimizers, objectives, averaging, checkpoints and reports.

`run_training(config, run_dir)` is the engine; `vitkit.train(...)` and `vitkit.finetune(...)` (vitkit.api) are the
Python API that resolves a recipe into its config first, as the command line does.
"""

from vitkit.training.step import NonFiniteLoss
from vitkit.training.trainer import run_training

__all__ = ["NonFiniteLoss", "run_training"]

"""Training and fine-tuning: one loop (engine), its optimizers, objectives, averaging, checkpoints and reports."""

from vitkit.train.engine import NonFiniteLoss, train

__all__ = ["NonFiniteLoss", "train"]

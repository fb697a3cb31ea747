"""The embedded Fashion-MNIST subset whatever is installed; torch's thread count restored after each run."""

from tiny_run import embedded_data, restore_threads  # noqa: F401  (fixtures)

"""The tiny engine recipe on the embedded Fashion-MNIST subset (tests/tiny_run.py)."""

from tiny_run import embedded_data, restore_threads, tiny  # noqa: F401  (fixtures)

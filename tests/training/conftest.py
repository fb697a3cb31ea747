"""A tiny recipe on the embedded Fashion-MNIST subset, so engine tests take seconds."""

from tiny_run import embedded_data, restore_threads, tiny  # noqa: F401  (fixtures)

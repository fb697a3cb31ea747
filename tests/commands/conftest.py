"""The run-aware commands' shared run, and the tiny recipe's fixtures."""

from photo_run import photo_run  # noqa: F401  (fixtures)
from tiny_run import embedded_data, restore_threads  # noqa: F401

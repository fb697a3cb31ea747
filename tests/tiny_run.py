"""The tiny run's overrides under their former name, for tests/commands/test_python_api.py's import until that file
imports `TINY_RECIPE` from tests/tiny.py; delete this module then."""

from tiny import TINY_RECIPE as TINY

__all__ = ["TINY"]

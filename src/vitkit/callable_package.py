"""Packages that are also functions: `vitkit.train(...)` and `vitkit.evaluate(...)` are the Python API of the
commands, while `vitkit.train` and `vitkit.evaluate` stay the packages their modules are imported from."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class CallablePackage(types.ModuleType):
    """A package whose call is the function named by its `__call_target__` ('module:function'), imported on the
    first call, so importing the package costs no more than before."""

    __call_target__: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, function = self.__call_target__.partition(":")
        return getattr(importlib.import_module(module), function)(*args, **kwargs)


def make_callable(package: str, target: str) -> None:
    """Make the (imported) package `package` callable as `target`, 'module:function'."""
    module = sys.modules[package]
    module.__class__ = CallablePackage
    module.__call_target__ = target  # type: ignore[attr-defined]

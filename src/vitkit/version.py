"""vitkit's version: pyproject.toml's [project] version, read from the installed metadata (one place)."""

import importlib.metadata

try:
    __version__ = importlib.metadata.version("vitkit")
except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

"""Packaging facts users rely on: one version, typed package marker, the Python the code needs."""

import tomllib
from pathlib import Path

import vitkit

ROOT = Path(__file__).parents[1]


def test_the_version_is_pyprojects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert vitkit.__version__ == project["version"]
    assert project["requires-python"] == ">=3.11"  # tomllib


def test_the_package_is_marked_typed():
    assert (Path(vitkit.__file__).parent / "py.typed").is_file()

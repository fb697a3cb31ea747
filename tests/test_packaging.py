"""Packaging facts users rely on: one version, typed package marker, the Python the code needs, the sample-photo
script runs as pasted and `make setup` installs what it needs."""

import os
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


def test_the_sample_photo_script_runs_as_pasted_and_make_setup_installs_its_needs():
    script = ROOT / "benchmarks" / "make_photo_folders.py"
    assert os.access(script, os.X_OK) and script.read_text().startswith("#!/usr/bin/env python3\n")
    bench = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["bench"]
    assert any(requirement.startswith("scikit-image") for requirement in bench)
    assert "-e '.[test,dev,bench]'" in (ROOT / "Makefile").read_text()

# The README's commands. `make run` sets up and runs the main job; `make test` runs the fast tests (about a minute on 2
# cores, several times that on cores other jobs share),
# `make test-slow` the rest (process groups, kill-and-resume, full-size conversions, benchmarks, torch.compile,
# the headless-Chromium rendering), `make test-all` both, as CI does. `make lint`: ruff (lint, format) and mypy.
# `make docs` builds the documentation site into site/ (mkdocs.yml), failing on any warning.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup run test test-slow test-all lint docs

setup: $(BIN)/vitkit

$(BIN)/vitkit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "make setup: installing vitkit, torch and the test, dev and bench extras into $(VENV) (on Linux torch brings"
	@echo "its CUDA libraries: a few GB to download, about 7 GB installed; minutes, pip shows each package as it goes)"
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar on -e '.[test,dev,bench]'  # bench: scikit-image for benchmarks/make_photo_folders.py
	touch $@

run: setup
	$(BIN)/vitkit train

test: setup
	$(BIN)/python -m pytest -n auto --maxprocesses=4

test-slow: setup
	$(BIN)/python -m pytest -m slow -rs

test-all: setup
	$(BIN)/python -m pytest -m 'slow or not slow' -rs

lint: setup
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy src/vitkit

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

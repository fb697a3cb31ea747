"""The recipes that ship with vitkit: the TOML files beside this module (package data; the checkout's configs/
links here), named by their stem, so `--config photos_finetune` reads the same file from any directory an
installed vitkit runs in (vitkit.recipe.resolve.recipe_file finds them). Imports no torch: `vitkit train --help`
lists the names."""

from __future__ import annotations

from pathlib import Path

RECIPES_DIR = Path(__file__).parent
SUFFIX = ".toml"


def shipped_recipes() -> list[str]:
    """The names of the shipped recipes, sorted."""
    return sorted(path.stem for path in RECIPES_DIR.glob(f"*{SUFFIX}"))

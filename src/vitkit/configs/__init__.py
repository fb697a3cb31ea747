"""The recipes that ship with vitkit: the TOML files beside this module (package data; the checkout's configs/
links here), named by their stem, so `--config photos_finetune` reads the same file from any directory an
installed vitkit runs in. A path to a TOML file is always read as that file. Imports no torch: `vitkit train
--help` lists the names."""

from __future__ import annotations

from pathlib import Path

RECIPES_DIR = Path(__file__).parent
SUFFIX = ".toml"


def shipped_recipes() -> list[str]:
    """The names of the shipped recipes, sorted."""
    return sorted(path.stem for path in RECIPES_DIR.glob(f"*{SUFFIX}"))


def recipe_file(name_or_path: str | Path) -> Path:
    """The TOML file a `--config` names: an existing file as given, else a shipped recipe of that name (with or
    without `.toml`). Neither is a FileNotFoundError that lists the shipped names."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.parent == Path(".") and path.suffix in ("", SUFFIX):
        shipped = RECIPES_DIR / f"{path.stem}{SUFFIX}"
        if shipped.is_file():
            return shipped
    raise FileNotFoundError(
        f"{name_or_path}: no such config file or shipped recipe (shipped: {', '.join(shipped_recipes())})"
    )

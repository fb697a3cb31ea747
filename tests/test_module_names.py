"""A module's file name says what it holds, once: two files under src/ share a name only where they are one concept
-- a command (`commands/X.py`) and its options (`commands/parsers/X.py`), or a command and the module it runs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vitkit"

# The same name for the same concept beyond a command and its parser, each with its reason.
SHARED = {
    "fewshot.py": ("evaluation/fewshot.py", "`vitkit fewshot` runs vitkit.evaluation.fewshot"),
}


def same_name_groups(package: Path) -> dict[str, list[str]]:
    """{file name: its paths under `package`} for every name two or more modules share."""
    paths = defaultdict(list)
    for path in package.rglob("*.py"):
        paths[path.name].append(path.relative_to(package).as_posix())
    return {name: sorted(found) for name, found in paths.items() if len(found) > 1}


def unexplained(groups: dict[str, list[str]]) -> dict[str, list[str]]:
    """The groups left once __init__.py, a command with its parser, and SHARED's entries are set aside."""
    left = {}
    for name, paths in groups.items():
        rest = set(paths) - {f"commands/{name}", f"commands/parsers/{name}"}
        if name == "__init__.py" or (name in SHARED and rest == {SHARED[name][0]}):
            continue
        if rest:
            left[name] = paths
    return left


def test_no_two_modules_share_a_name_for_different_things():
    assert unexplained(same_name_groups(PACKAGE)) == {}


def test_every_allowed_pair_still_exists():
    """An entry of SHARED whose module moved is removed, not left to allow a new pair of that name."""
    groups = same_name_groups(PACKAGE)
    assert {name: groups.get(name) for name in SHARED} == {
        name: sorted([f"commands/{name}", f"commands/parsers/{name}", path])
        for name, (path, _) in SHARED.items()
    }


def test_a_new_pair_of_one_name_is_found(tmp_path):
    for path in ["commands/serve.py", "commands/parsers/serve.py", "data/batch.py"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    assert unexplained(same_name_groups(tmp_path)) == {}
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "serve.py").touch()
    (tmp_path / "bench" / "batch.py").touch()
    assert unexplained(same_name_groups(tmp_path)) == {
        "serve.py": ["bench/serve.py", "commands/parsers/serve.py", "commands/serve.py"],
        "batch.py": ["bench/batch.py", "data/batch.py"],
    }

"""Which package may import which, read with `ast` (tests/test_imports.py builds the graph): the models know no
data and no training, the data knows no models, only the command line and the benchmarks parse arguments, and
nothing but the entry point imports the commands. A failure names the offending import."""

from __future__ import annotations

import ast
from pathlib import Path

from test_imports import PACKAGE, SRC, imports_of, module_files

FORBIDDEN = {  # importer package -> packages it must not import
    "vitkit.models": (
        "vitkit.data",
        "vitkit.training",
        "vitkit.evaluation",
        "vitkit.commands",
        "vitkit.bench",
    ),
    "vitkit.data": (
        "vitkit.models",
        "vitkit.training",
        "vitkit.evaluation",
        "vitkit.commands",
        "vitkit.bench",
    ),
    "vitkit": ("vitkit.commands",),  # every module: the commands are leaves, reached from vitkit.cli only
}
MAY_IMPORT_COMMANDS = ("vitkit.cli", "vitkit.commands")
MAY_USE_ARGPARSE = ("vitkit.cli", "vitkit.commands", "vitkit.bench")


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def wrong_imports(graph: dict[str, set[str]]) -> list[str]:
    """'importer -> imported' for every edge a rule forbids."""
    found = []
    for importer, targets in sorted(graph.items()):
        for package, banned in FORBIDDEN.items():
            if not inside(importer, package):
                continue
            if banned == ("vitkit.commands",) and any(inside(importer, p) for p in MAY_IMPORT_COMMANDS):
                continue
            found += [f"{importer} -> {t}" for t in sorted(targets) if any(inside(t, b) for b in banned)]
    return sorted(set(found))


def argparse_users(modules: dict[str, Path]) -> list[str]:
    """Modules outside the command line and the benchmarks that import argparse."""
    found = []
    for name, path in modules.items():
        if any(inside(name, p) for p in MAY_USE_ARGPARSE):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if "argparse" in names:
                found.append(f"{path}:{node.lineno}")
    return found


def test_packages_import_only_what_their_layer_allows() -> None:
    graph, _ = imports_of(module_files(SRC, PACKAGE))
    assert not wrong_imports(graph), "imports against the layer rules:\n" + "\n".join(wrong_imports(graph))


def test_only_the_command_line_and_benchmarks_parse_arguments() -> None:
    found = argparse_users(module_files(SRC, PACKAGE))
    assert not found, "argparse outside vitkit.cli, vitkit.commands and vitkit.bench:\n" + "\n".join(found)


def test_the_rules_catch_a_deliberately_wrong_import(tmp_path: Path) -> None:
    """A models module importing the data, a data module importing the models and a library module importing a
    command are each named; the same imports from the commands pass."""
    package = tmp_path / "vitkit"
    for sub in ("models", "data", "commands", "training"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "models" / "vit.py").write_text("from vitkit.data import loader\n")
    (package / "data" / "loader.py").write_text("import vitkit.models.vit\nimport argparse\n")
    (package / "training" / "loop.py").write_text("from vitkit.commands import train\n")
    (package / "commands" / "train.py").write_text("import argparse\nfrom vitkit.data import loader\n")
    modules = module_files(tmp_path, "vitkit")
    graph, _ = imports_of(modules)
    assert wrong_imports(graph) == [
        "vitkit.data.loader -> vitkit.models",
        "vitkit.data.loader -> vitkit.models.vit",
        "vitkit.models.vit -> vitkit.data",
        "vitkit.models.vit -> vitkit.data.loader",
        "vitkit.training.loop -> vitkit.commands",
        "vitkit.training.loop -> vitkit.commands.train",
    ]
    assert argparse_users(modules) == [f"{package / 'data' / 'loader.py'}:2"]

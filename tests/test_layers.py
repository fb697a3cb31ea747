"""The layer rules of the design (../shared/design.md, "Layer rules"), one entry of RULES each, read with `ast` from
the import graph tests/test_imports.py builds; plus argparse, and no package cycle. A failure names the rule and
the offending import; the self-test plants one wrong import per rule and sees each rule fire on it alone."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from test_imports import PACKAGE, SRC, imports_of, module_files, shortest_cycle, tangles


@dataclass(frozen=True)
class Rule:
    """Modules inside `importers` (less those inside `exempt`) import nothing inside `banned`."""

    says: str
    importers: tuple[str, ...]
    banned: tuple[str, ...]
    exempt: tuple[str, ...] = ()


RULES = (
    Rule(
        "models/ imports nothing of data/, training/, evaluation/, commands/ (nor bench/)",
        ("vitkit.models",),
        ("vitkit.data", "vitkit.training", "vitkit.evaluation", "vitkit.commands", "vitkit.bench"),
    ),
    Rule("precision imports no model code", ("vitkit.precision",), ("vitkit.models", "vitkit.weights")),
    Rule(
        "data/ imports no models/ or training/ (nor evaluation/, commands/, bench/)",
        ("vitkit.data",),
        ("vitkit.models", "vitkit.training", "vitkit.evaluation", "vitkit.commands", "vitkit.bench"),
    ),
    Rule(
        "weights/ imports models/ only downward: models/ never import weights/",
        ("vitkit.models",),
        ("vitkit.weights",),
    ),
    Rule(
        "evaluation/, inspect/, export/, service/ never use training/ or commands/ (nor bench/, above training/)",
        ("vitkit.evaluation", "vitkit.inspect", "vitkit.export", "vitkit.service"),
        ("vitkit.training", "vitkit.commands", "vitkit.bench"),
    ),
    Rule(
        "training/ never uses bench/ or commands/", ("vitkit.training",), ("vitkit.bench", "vitkit.commands")
    ),
    Rule(
        "the commands are leaves, imported by vitkit.cli only",
        ("vitkit",),
        ("vitkit.commands",),
        exempt=("vitkit.cli", "vitkit.commands"),
    ),
)
MAY_USE_ARGPARSE = ("vitkit.cli", "vitkit.commands", "vitkit.bench")


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def wrong_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Rule -> 'importer -> imported' for every edge it forbids (only the rules that have some)."""
    found: dict[str, list[str]] = {}
    for rule in RULES:
        edges = [
            f"{importer} -> {target}"
            for importer, targets in sorted(graph.items())
            if any(inside(importer, p) for p in rule.importers)
            and not any(inside(importer, p) for p in rule.exempt)
            for target in sorted(targets)
            if any(inside(target, b) for b in rule.banned)
        ]
        if edges:
            found[rule.says] = edges
    return found


def package_of(module: str) -> str:
    """The node of the package graph: vitkit's subpackage holding `module`, or the top-level module itself."""
    return ".".join(module.split(".")[:2])


def package_cycles(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b -> a (a.x -> b.y, b.z -> a.w)' for a shortest cycle through each tangle of packages."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    witness: dict[tuple[str, str], str] = {}
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            edge = (package_of(importer), package_of(target))
            if edge[0] != edge[1]:
                packages[edge[0]].add(edge[1])
                witness.setdefault(edge, f"{importer} -> {target}")
    found = []
    for tangle in tangles(packages):
        cycle = shortest_cycle(tangle, packages)
        found.append(" -> ".join(cycle) + f" ({', '.join(witness[e] for e in pairwise(cycle))})")
    return found


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
    found = wrong_imports(graph)
    assert not found, "imports against the layer rules:\n" + "\n".join(
        f"{rule}:\n  " + "\n  ".join(edges) for rule, edges in found.items()
    )


def test_no_package_imports_another_that_imports_it_back() -> None:
    graph, _ = imports_of(module_files(SRC, PACKAGE))
    found = package_cycles(graph)
    assert not found, "package cycles:\n" + "\n".join(found)


def test_only_the_command_line_and_benchmarks_parse_arguments() -> None:
    found = argparse_users(module_files(SRC, PACKAGE))
    assert not found, "argparse outside vitkit.cli, vitkit.commands and vitkit.bench:\n" + "\n".join(found)


PLANTED = {  # file -> its source: one wrong import per rule, then imports the rules allow
    "models/vit.py": "from vitkit.data import loader\n",
    "precision.py": "import vitkit.models.config\n",
    "data/loader.py": "from vitkit.training import loop\nimport argparse\n",
    "models/config.py": "import vitkit.weights\n",
    "inspect/attention.py": "from vitkit.training.loop import fit\n",
    "training/loop.py": "from vitkit.bench import timing\n\ndef fit(): ...\n",
    "storage.py": "import vitkit.commands.train\n",
    "export/onnx.py": "from vitkit.service import app\n",  # with the next: a package cycle, no module cycle
    "service/app.py": "import vitkit.export\nimport vitkit.models.config\nimport vitkit.inspect.attention\n",
    "cli.py": "import argparse\nfrom vitkit.commands import train\n",
    "commands/train.py": "import argparse\nfrom vitkit.training import loop\n",
    "bench/timing.py": "import argparse\n",
}


def test_each_rule_fires_on_a_deliberately_wrong_import(tmp_path: Path) -> None:
    """Every rule names the one wrong import planted for it and nothing else; the allowed imports pass."""
    package = tmp_path / "vitkit"
    for sub in ("models", "data", "training", "inspect", "export", "service", "weights", "commands", "bench"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    for name, source in PLANTED.items():
        (package / name).write_text(source)
    modules = module_files(tmp_path, "vitkit")
    graph, _ = imports_of(modules)
    assert wrong_imports(graph) == {
        RULES[0].says: ["vitkit.models.vit -> vitkit.data", "vitkit.models.vit -> vitkit.data.loader"],
        RULES[1].says: ["vitkit.precision -> vitkit.models", "vitkit.precision -> vitkit.models.config"],
        RULES[2].says: [
            "vitkit.data.loader -> vitkit.training",
            "vitkit.data.loader -> vitkit.training.loop",
        ],
        RULES[3].says: ["vitkit.models.config -> vitkit.weights"],
        RULES[4].says: [
            "vitkit.inspect.attention -> vitkit.training",
            "vitkit.inspect.attention -> vitkit.training.loop",
        ],
        RULES[5].says: [
            "vitkit.training.loop -> vitkit.bench",
            "vitkit.training.loop -> vitkit.bench.timing",
        ],
        RULES[6].says: ["vitkit.storage -> vitkit.commands", "vitkit.storage -> vitkit.commands.train"],
    }
    assert package_cycles(graph) == [
        "vitkit.export -> vitkit.service -> vitkit.export (vitkit.export.onnx -> vitkit.service, "
        "vitkit.service.app -> vitkit.export)"
    ]
    assert argparse_users(modules) == [f"{package / 'data' / 'loader.py'}:2"]

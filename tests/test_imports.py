"""The import graph of src/vitkit, read with `ast`: no cycle among vitkit modules, every vitkit import at module top.

A cycle works only while some import of it stays inside a function (or a lazy module `__getattr__`), and breaks
as soon as someone moves that import to the top; so both are refused here, for every module, without importing
any of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "vitkit"


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of `package` (a package's name is its __init__.py)."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """What the statement asks for, as dotted names (a `from x import y` gives x.y, module or not, and x)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = importer.split(".") if is_package else importer.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def imports_of(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """The module graph and the function-level imports of vitkit modules ('file:line: statement').

    `import a.b.c` runs a, a.b and a.b.c: each is an edge, except the importer's own parent packages (already
    initialised, or initialising it) when only implied. `from a.b import y` depends on the module a.b.y when there
    is one, else on a.b itself, own parent or not (y is a name defined there, which must exist by then).
    """
    graph: dict[str, set[str]] = {name: set() for name in modules}
    nested: list[str] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        own_parents = set(_ancestors(importer))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            asked = _imported(node, importer, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                submodules = [name for name in asked[:-1] if name in modules]
                targets = submodules if len(submodules) == len(asked) - 1 else [*submodules, asked[-1]]
            else:
                targets = asked
            targets = [t for t in targets if t in modules]
            for target in targets:
                graph[importer].add(target)
                graph[importer] |= {t for t in _ancestors(target) if t in modules and t not in own_parents}
            graph[importer].discard(importer)
            if targets and id(node) not in top_level:
                nested.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return graph, nested


def tangles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: each member imports every other, indirectly."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def shortest_cycle(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle a -> ... -> a through the component's first module (breadth-first back to it)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def test_no_import_cycle_among_vitkit_modules() -> None:
    graph, _ = imports_of(module_files(SRC, PACKAGE))
    found = [
        " -> ".join(shortest_cycle(tangle, graph))
        + f"  ({len(tangle)} modules tangled: {', '.join(sorted(tangle))})"
        for tangle in tangles(graph)
    ]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_every_vitkit_import_is_at_module_top() -> None:
    _, nested = imports_of(module_files(SRC, PACKAGE))
    assert not nested, "vitkit imports inside functions or blocks (move them to the top):\n" + "\n".join(
        nested
    )


def test_the_checks_find_a_cycle_and_a_nested_import(tmp_path: Path) -> None:
    """The reader itself: a package cycle through `from pkg import name`, and an import inside a function."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import f\n")
    (package / "a.py").write_text("from pkg.sub import helper\n\ndef f():\n    from pkg import b\n")
    (package / "b.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .helper import g\n")
    (package / "sub" / "helper.py").write_text("from pkg import f\n\ndef g(): ...\n")
    graph, nested = imports_of(module_files(tmp_path, "pkg"))
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.helper", "pkg.b"}
    assert tangles(graph) == [{"pkg", "pkg.a", "pkg.sub", "pkg.sub.helper"}]
    assert shortest_cycle(tangles(graph)[0], graph) == ["pkg", "pkg.a", "pkg.sub.helper", "pkg"]
    assert nested == [f"{package / 'a.py'}:4: from pkg import b"]


def test_torchvision_is_imported_where_used_outside_the_benchmarks() -> None:
    """Importing torchvision costs as much as importing torch (it imports torch._dynamo): a command that loads
    weights and reads photos (predict, a linear head's second fit) must not pay it, so outside vitkit.bench it is
    imported inside the functions that use it."""
    top_level = []
    for name, path in module_files(SRC, PACKAGE).items():
        if name.startswith(f"{PACKAGE}.bench"):
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                )
                if any(m.split(".")[0] == "torchvision" for m in modules):
                    top_level.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert not top_level, "torchvision imported at module top:\n" + "\n".join(top_level)

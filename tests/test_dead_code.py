"""No dead code under src/vitkit: every function, class, method and property is called or referenced somewhere.

vulture (a name-based reader of the source, no imports) decides. Uses are what src/, tests/, benchmarks/ and
experiments/ say, plus what Python never sees written: the public API (vitkit/__init__.py's _EXPORTS, reached
through a module `__getattr__`), the console scripts of pyproject.toml and the docs' `::: name` references
(mkdocstrings renders those, a module's every public name). The names called by frameworks rather than by vitkit
are listed in FRAMEWORK_CALLED, each with who calls it.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
USERS = [ROOT / d for d in ("src", "tests", "benchmarks", "experiments")]
KINDS = ("function", "class", "method", "property")  # not attributes, variables or imports (ruff's F401)
FRAMEWORK_CALLED = {  # name -> who calls it
    "__getattr__": "Python, for a name a module lacks (PEP 562: vitkit's lazy public API)",
    "__dir__": "Python's dir() of a module (PEP 562)",
}
FRAMEWORK_DECORATORS = ["@app.*"]  # FastAPI routes and exception handlers of vitkit.service.app


def public_names(module: str) -> list[str]:
    """What `::: module` documents: the module's top-level names without a leading underscore; for `::: a.b.name`
    that is not a module, `name`."""
    path = SRC.joinpath(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not file.is_file():
        return [module.rsplit(".", 1)[-1]]
    names = []
    for node in ast.parse(file.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def used_outside_python() -> list[str]:
    """The names the public API, the console scripts and the docs' references use."""
    init = ast.parse((SRC / "vitkit" / "__init__.py").read_text())
    exports = next(
        node.value
        for node in init.body
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["_EXPORTS"]
    )
    names = list(ast.literal_eval(exports))
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    names += [target.rsplit(":", 1)[-1] for target in scripts.values()]
    for page in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]:
        for module in re.findall(r"^\s*::: ([\w.]+)", page.read_text(), flags=re.M):
            names += public_names(module)
    return names


def dead_code(package: Path, users: list[Path], extra_uses: list[str]) -> list[str]:
    """'file:line: unused function name' for each definition under `package` that nothing in `users` (or in
    `extra_uses`, names) uses."""
    reader = Vulture(ignore_names=list(FRAMEWORK_CALLED), ignore_decorators=FRAMEWORK_DECORATORS)
    reader.scavenge([str(p) for p in users])
    reader.scan("\n".join(extra_uses), filename="<used outside Python>")
    return [
        f"{item.filename.relative_to(package.parent)}:{item.first_lineno}: unused {item.typ} {item.name}"
        for item in reader.get_unused_code()
        if item.typ in KINDS and item.filename.is_relative_to(package)
    ]


def test_every_definition_under_src_is_used() -> None:
    found = dead_code(SRC / "vitkit", USERS, used_outside_python())
    assert not found, "defined but never called or referenced (remove them):\n" + "\n".join(found)


def test_the_check_finds_unused_code_and_counts_the_uses_python_cannot_see(tmp_path: Path) -> None:
    """A function and a method nobody calls are named; names used only from outside Python, module hooks and
    FastAPI routes are not."""
    package = tmp_path / "vitkit"
    package.mkdir()
    (package / "tool.py").write_text(
        "def exported(): ...\n\ndef forgotten(): ...\n\nclass Kept:\n    def forgotten_method(self): ...\n\n"
        "def __getattr__(name): ...\n\n@app.get('/health')\ndef health(): ...\n\nKept()\n"
    )
    assert dead_code(package, [package], ["exported"]) == [
        "vitkit/tool.py:3: unused function forgotten",
        "vitkit/tool.py:6: unused method forgotten_method",
    ]
    assert public_names("vitkit.weights.create.create_model") == ["create_model"]
    assert {"count_flops", "count_parameters"} <= set(public_names("vitkit.flops"))  # `::: vitkit.flops`
    assert {"create_model", "load_weights", "main", "RunConfig"} <= set(used_outside_python())

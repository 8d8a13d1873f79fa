"""The package's layout: no import cycle between its modules, no private names imported across modules."""

from __future__ import annotations

import ast
from pathlib import Path

import dpgp_gpflow

PACKAGE = Path(dpgp_gpflow.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """``(imported module, names, at module level)`` for every intra-package import in ``path``."""
    tree = ast.parse(path.read_text())
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            yield target, [a.name for a in node.names], id(node) in top_level
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dpgp_gpflow"):
                    yield alias.name, [], id(node) in top_level


def _graph():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target, names, _ in _imports(path):
            for n in names:  # "from . import sampling" imports a module
                if f"{target}.{n}" in modules:
                    edges.add(f"{target}.{n}")
            if target in modules:
                edges.add(target)
        graph[name] = edges
    return modules, graph


def test_no_import_cycle():
    _, graph = _graph()
    # a package's __init__ re-exports its children: an edge from a child to its own package (or an
    # ancestor) is the usual "import the package" and would make every package a cycle; skip those
    def edges(m):
        return {t for t in graph[m] if t != m and not m.startswith(t + ".")}

    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in edges(m):
            if state.get(t) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_private_names_imported_across_modules_and_no_local_package_imports():
    modules, _ = _graph()
    for name, path in modules.items():
        for target, names, top in _imports(path):
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            assert not private, f"{name} imports private {private} from {target}"
            if name != "dpgp_gpflow.__main__":  # the demo imports lazily to start fast
                assert top, f"{name} imports {target} inside a function"

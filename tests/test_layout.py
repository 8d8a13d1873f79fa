"""The package's layout: no import cycle between its modules, no private names imported across modules,
and the lazily importing ``__init__`` (every name of ``__all__`` resolves)."""

from __future__ import annotations

import ast
import importlib
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
    for node in tree.body:  # "if TYPE_CHECKING:" imports are module-level imports for type checkers
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            top_level |= {id(child) for child in node.body}
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
            # the command lines import on demand so that --help answers without TensorFlow
            if name != "dpgp_gpflow.__main__" and not (name == "dpgp_gpflow.cli" or name.startswith("dpgp_gpflow.cli.")):
                assert top, f"{name} imports {target} inside a function"


def test_all_names_resolve_and_are_listed():
    """Every name of ``__all__`` resolves (the package imports them on first use) and ``dir()`` lists
    them with every submodule."""
    listing = dir(dpgp_gpflow)
    for name in dpgp_gpflow.__all__:
        assert getattr(dpgp_gpflow, name) is not None
        assert name in listing
    submodules = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
                  if (p.suffix == ".py" or (p / "__init__.py").is_file()) and not p.name.startswith("_")}
    assert submodules <= set(listing)
    assert dpgp_gpflow.models.DPGPR.__name__ == "DPGPR"
    assert dpgp_gpflow.PrivacyAccountant is dpgp_gpflow.accounting.PrivacyAccountant
    try:
        dpgp_gpflow.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_lazy_exports_match_the_type_checking_imports():
    """The names imported on demand (``_EXPORTS``) are those the ``if TYPE_CHECKING:`` block imports
    for type checkers, from the same modules; every submodule in ``__all__`` is imported there too."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    names, modules = {}, set()
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names:
            if node.module is None:
                modules.add(alias.name)
            else:
                names[alias.name] = node.module
    assert names == dpgp_gpflow._EXPORTS
    assert {n for n in dpgp_gpflow.__all__ if n not in names} <= modules


def _declared_public():
    """``{module: names}`` of every literal ``__all__`` in the package, read without importing it."""
    declared = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
                declared[_module_name(path)] = list(ast.literal_eval(node.value))
    return declared


def test_public_api_is_small_and_declared_by_the_packages():
    """Issue 35: every ``__all__`` together (the public API, docs/DESIGN_MAP.md "Public API") holds at
    most 150 distinct names, each of which exists; a module inside a subpackage declares only names its
    subpackage (or a top-level module re-exporting it) makes public; internal helpers are imported by name."""
    declared = _declared_public()
    assert declared["dpgp_gpflow"] == dpgp_gpflow.__all__  # the reader above sees what Python sees
    names = set().union(*map(set, declared.values()))
    assert len(names) <= 150, f"{len(names)} public names"
    top_level = set().union(*(v for m, v in declared.items() if (PACKAGE / f"{m[12:]}.py").is_file()))  # distributed
    for module, public in declared.items():
        assert len(public) == len(set(public)), module
        loaded = importlib.import_module(module)
        assert [n for n in public if not hasattr(loaded, n)] == [], module
        package = module.rsplit(".", 1)[0]
        if package != "dpgp_gpflow" and package in declared:
            extra = set(public) - set(declared[package]) - top_level
            assert not extra, f"{module} declares {sorted(extra)}, which {package} keeps internal"

"""The package's layering: its import graph has no cycle, and it never imports the plugins.

The graph is read from the source with ``ast``: an edge ``a -> b`` for every ``import``
statement of module ``a`` that names module ``b`` of the package, at module level or
inside a function (a deferred import still makes ``a`` depend on ``b``). A cycle means two
modules each need the other; the fix is to move code to the layer it belongs to, not to
defer the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "llmsched_gym"

def module_files(package: str = PACKAGE) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of ``package`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported_modules(module: str, path: Path, modules) -> set[str]:
    """The modules that the import statements anywhere in ``path`` (the file of
    ``module``) name, as absolute names; ``modules`` are the names that are modules.

    ``from a import b`` names module ``a``; where every imported name is a submodule
    (``from . import plots``) it names those instead: the package's ``__init__`` runs too,
    but a package re-exporting its submodules must not read as a cycle with each of them.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: level 1 is this package, 2 its parent...
                parts = package.split(".")
                source = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                source = node.module
            subs = {f"{source}.{alias.name}" for alias in node.names}
            out.update(subs if subs <= set(modules) else {source} | (subs & set(modules)))
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: the package's other modules it imports}``."""
    files = module_files()
    return {m: (imported_modules(m, path, files) & set(files)) - {m} for m, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    inside = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & inside))}" for m in component)


def test_graph_sees_deferred_imports():
    graph = import_graph()
    assert "llmsched_gym.simulator" in graph["llmsched_gym.scenarios"]  # module level
    assert "llmsched_gym.evaluation.plots" in graph["llmsched_gym.evaluation.harness"]  # inside a function


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(describe(graph, c) for c in found)


@pytest.mark.parametrize("plugin", ["baselines", "agents"])
def test_package_never_imports_plugins(plugin):
    """Policies and subcommands of ``baselines`` / ``agents`` arrive through entry points
    (``llmsched_gym.policies``, ``llmsched_gym.commands``), never by an import statement."""
    files = module_files()
    offenders = [module for module, path in files.items()
                 if any(n == plugin or n.startswith(plugin + ".") for n in imported_modules(module, path, files))]
    assert not offenders, f"{', '.join(offenders)} import {plugin}"


#: The engine's public modules: its door (engine/api.py), its configuration and the step-time
#: and hardware models users configure. Everything else in engine/ is internal.
ENGINE_PUBLIC = {"llmsched_gym.engine", "llmsched_gym.engine.api", "llmsched_gym.engine.config",
                 "llmsched_gym.engine.hardware", "llmsched_gym.engine.latency"}
#: Modules that still index the engine's arrays past its door (issue: closing the engine).
#: The list may only shrink.
ENGINE_INTERNALS_USED_BY = {"llmsched_gym.envs.vector", "llmsched_gym.envs.batched"}


def test_engine_internals_stay_behind_its_door():
    outside = {}
    for package in (PACKAGE, "baselines", "agents"):
        files = module_files(package)
        every = set(files) | set(module_files())
        for module, path in files.items():
            if module.startswith("llmsched_gym.engine"):
                continue
            used = {n for n in imported_modules(module, path, every)
                    if n.startswith("llmsched_gym.engine") or n.startswith(".engine")}
            internal = {n for n in used if n not in ENGINE_PUBLIC}
            if internal:
                outside[module] = internal
    new = {m: sorted(v) for m, v in outside.items() if m not in ENGINE_INTERNALS_USED_BY}
    assert not new, f"engine internals imported past engine/api.py: {new}"
    closed = ENGINE_INTERNALS_USED_BY - set(outside)
    assert not closed, f"these modules no longer reach past the door; remove them from the list: {sorted(closed)}"


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the package's folders and top-level modules."""
    def folder(m: str) -> str:
        return ".".join(m.split(".")[:2])
    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(folder(m), set()).update(folder(d) for d in deps if folder(d) != folder(m))
    return out


def test_no_folder_level_cycles():
    found = cycles(folder_graph(import_graph()))
    assert not found, f"folder-level import cycles: {found}"


#: The package's layers, lowest first (docs/architecture.md, "Layers"): a folder or
#: top-level module imports only from its own layer or those below it.
LAYERS = [
    {"errors", "validation"},  # bad input and its one-line errors; the configuration models' machinery
    {"workloads", "gateway", "faults"},  # requests; gateway policies, detectors, EPP configs; fault schedules
    {"engine"},  # the compiled event loop, behind engine/api.py
    {"simulator", "capacity"},  # a cluster simulated; its capacity measured
    {"scenarios", "builtin_scenarios", "autoscaling", "calibration"},  # experiments built on the simulator
    {"evaluation"},  # the harness and the parameter search: Python arguments in, results out
    {"envs"},  # the Gymnasium environments
    {"cli"},  # every subcommand: flags, terminal tables, progress bars
    {""},  # the package itself (llmsched_gym/__init__.py)
]


def layer_of(folder: str) -> int:
    name = folder.removeprefix(PACKAGE).removeprefix(".")
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_every_folder_has_a_layer():
    missing = [f for f in folder_graph(import_graph()) if not any(
        f.removeprefix(PACKAGE).removeprefix(".") in layer for layer in LAYERS)]
    assert not missing, f"give these a layer in LAYERS (and docs/architecture.md): {missing}"


def test_folders_import_only_from_their_layer_or_below():
    graph = folder_graph(import_graph())
    upward = {f: sorted(d for d in deps if layer_of(d) > layer_of(f)) for f, deps in graph.items()}
    upward = {f: d for f, d in upward.items() if d}
    assert not upward, f"imports of a higher layer: {upward}"


def test_tests_never_import_benchmarks():
    """The benchmarks are scripts on top of the package; what a test needs of one lives in
    the package (``llmsched_gym.evaluation.blis``, ``agents.pooling``). A test importing a
    benchmark's module, or putting ``benchmarks/`` on a path, fails here."""
    scripts = {p.stem for p in (ROOT / "benchmarks").rglob("*.py")}
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():  # this test lists the scripts' names, it runs none
            continue
        tree = ast.parse(path.read_text(), str(path))
        names = imported_modules("tests." + path.stem, path, {})
        reaches = any(n.split(".")[0] in scripts | {"benchmarks"} for n in names) or any(
            isinstance(node, ast.Constant) and node.value == "benchmarks" for node in ast.walk(tree))
        if reaches:
            offenders.append(path.name)
    assert not offenders, f"tests reach into benchmarks/: {offenders}"

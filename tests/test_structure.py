"""The layers stay visible: no import cycles, no stage importing the assembly or the generator, core importing no
stage, and no module reaching into another module's private names.

Read from the source with ``ast`` (nothing is imported), so a violation is reported with the file and line that
introduced it. Every import statement counts, the ones inside functions too: a function-local import defers a
cycle to run time, it does not remove it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORE = "core"
STAGES = ("ingest", "enrich", "alerts", "dashboard")  # the pipeline's stages (core below them, nightjar above)
ABOVE_STAGES = ("nightjar", "generator")  # the assembly, and the generator that feeds the pipeline from outside
PACKAGES = (CORE, *STAGES, *ABOVE_STAGES)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the first-party module imported
    name: str | None  # the name taken from it (``from target import name``), None for ``import target``
    where: str  # path:line


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}


def imports(root: Path) -> list[Import]:
    """Every import statement of every first-party module that names a first-party module."""
    modules = first_party_modules(root)

    def resolve(dotted: str) -> str | None:  # the longest prefix that is a module
        parts = dotted.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    found: list[Import] = []
    for source, path in modules.items():
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found += [Import(source, t, None, where) for a in node.names if (t := resolve(a.name))]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for a in node.names:
                    target = resolve(f"{base}.{a.name}") or resolve(base)
                    if target is not None:
                        name = None if target == f"{base}.{a.name}" else a.name
                        found.append(Import(source, target, name, where))
    return found


def cycles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.source != e.target:
            graph.setdefault(e.source, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_violations(edges: list[Import]) -> list[str]:
    """Imports that go up: core importing anything but core, a stage importing the assembly or the generator."""
    bad = []
    for e in edges:
        src, dst = e.source.split(".")[0], e.target.split(".")[0]
        if (src == CORE and dst != CORE) or (src in STAGES and dst in ABOVE_STAGES):
            bad.append(f"{e.where}: {e.source} imports {e.target}")
    return bad


def private_imports(edges: list[Import]) -> list[str]:
    """``from other_module import _name``: a private name used outside the module that defines it."""
    return [f"{e.where}: {e.source} imports {e.target}.{e.name}" for e in edges
            if e.name and e.name.startswith("_") and not e.name.startswith("__") and e.source != e.target]


def test_no_import_cycles_among_first_party_modules() -> None:
    found = cycles(imports(REPO))
    assert not found, f"import cycles (move the shared piece below both modules): {found}"


def test_core_imports_no_stage_and_no_stage_imports_the_assembly_or_the_generator() -> None:
    bad = layer_violations(imports(REPO))
    assert not bad, "imports against the layers (move the shared piece into core or the owning stage):\n" + "\n".join(bad)


def test_no_module_imports_another_modules_private_names() -> None:
    bad = private_imports(imports(REPO))
    assert not bad, "private names imported from another module (make them public where they belong):\n" + "\n".join(bad)


def test_the_checks_see_a_cycle_an_upward_import_and_a_private_import(tmp_path: Path) -> None:
    """The checks above can fail: a small tree with one of each violation, relative and function-local imports."""
    files = {
        "core/__init__.py": "",
        "core/config.py": "def settings():\n    from alerts.rules import RULES  # up from core\n    return RULES\n",
        "alerts/__init__.py": "",
        "alerts/rules.py": "from .schema import _SCHEMA\nRULES = []\n",
        "alerts/schema.py": "from alerts import rules\n_SCHEMA = 1\n",
        "ingest/__init__.py": "",
        "ingest/parse.py": "import nightjar.pipeline\n",
        "nightjar/__init__.py": "",
        "nightjar/pipeline.py": "from core import config\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = imports(tmp_path)
    assert cycles(edges) == [["alerts.rules", "alerts.schema"]]
    assert sorted(layer_violations(edges)) == ["core/config.py:2: core.config imports alerts.rules",
                                               "ingest/parse.py:1: ingest.parse imports nightjar.pipeline"]
    assert private_imports(edges) == ["alerts/rules.py:1: alerts.rules imports alerts.schema._SCHEMA"]

"""Layers point only downward: util <- transport <- channel <- services <- agent;
tokenize and graph are standalone libraries on util, gpu one on tokenize; mpi (the interposer) is a client of the
channel and the services' wire formats, as the Python package is. In Python, no module of the
outboard package imports itself around a cycle."""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORDER = ["util", "transport", "channel", "services", "agent"]
STANDALONE = ["tokenize", "graph"]
# What each public header belongs to, for includes of "outboard/<x>.h".
PUBLIC = {"status": "util", "log": "util", "config": "util", "clock": "util", "stats": "util",
          "checksum": "util", "affinity": "util", "secure_config": "util", "channel": "channel", "service": "services",
          "agent": "agent", "tokenizer": "tokenize", "tokenize_client": "services", "graph": "graph",
          "graph_offload": "services"}


def layer_of(include: str) -> str | None:
    m = re.match(r"outboard/(\w+)\.h", include)
    if m:
        return PUBLIC.get(m.group(1))
    m = re.match(r"(\w+)/", include)
    return m.group(1) if m and m.group(1) in ORDER + STANDALONE + ["gpu"] else None


def test_no_layer_includes_a_higher_one() -> None:
    violations = []
    for layer in ORDER:
        for f in (ROOT / "src" / layer).rglob("*.[ch]*"):
            for inc in re.findall(r'#include "([^"]+)"', f.read_text()):
                target = layer_of(inc)
                if target in ORDER and ORDER.index(target) > ORDER.index(layer):
                    violations.append(f"{f.relative_to(ROOT)} includes {inc} ({target})")
    assert violations == []


def test_standalone_libraries_depend_only_on_util() -> None:
    bad = []
    for lib in STANDALONE:
        for f in (ROOT / "src" / lib).rglob("*.[ch]*"):
            for inc in re.findall(r'#include "([^"]+)"', f.read_text()):
                if layer_of(inc) not in (None, "util", lib):
                    bad.append(f"{f.relative_to(ROOT)} includes {inc}")
    assert bad == []


def test_the_gpu_library_stands_on_tokenize_alone() -> None:
    bad = []
    for f in (ROOT / "src" / "gpu").rglob("*.[ch]*"):
        for inc in re.findall(r'#include "([^"]+)"', f.read_text()):
            if layer_of(inc) not in (None, "util", "tokenize", "gpu"):
                bad.append(f"{f.relative_to(ROOT)} includes {inc}")
    assert bad == [] and (ROOT / "src" / "gpu" / "bpe_kernels.h").exists()


def test_the_interposer_includes_only_util_the_channel_and_wire_formats() -> None:
    bad = []
    for f in (ROOT / "src" / "mpi").rglob("*.[ch]*"):
        for inc in re.findall(r'#include "([^"]+)"', f.read_text()):
            if layer_of(inc) in ("transport", "agent", "tokenize", "graph") or (
                    layer_of(inc) == "services" and not inc.endswith("_wire.h")):
                bad.append(f"{f.relative_to(ROOT)} includes {inc}")
    assert bad == []


def test_only_transport_includes_ucx() -> None:
    offenders = [str(f.relative_to(ROOT)) for f in (ROOT / "src").rglob("*.[ch]*")
                 if "<ucp/" in f.read_text() and f.parent.name != "transport"]
    offenders += [str(f.relative_to(ROOT)) for f in (ROOT / "include").rglob("*.h") if "<ucp/" in f.read_text()]
    assert offenders == []


# ---- Python: no import cycles inside the outboard package

PACKAGE = ROOT / "python" / "outboard"


def _modules(package: Path) -> dict[str, Path]:
    """Every module of a package by dotted name; a package is named by its __init__.py."""
    modules = {}
    for f in package.rglob("*.py"):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = f
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (in functions and classes too), but those under
    ``if TYPE_CHECKING:``, which never run."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _is_extension(name: str, modules: dict[str, Path]) -> bool:
    """A compiled module of the package (``outboard._core``): built, so not under python/."""
    package, _, last = name.rpartition(".")
    return (package == "outboard" and modules[package].name == "__init__.py" and last.startswith("_")
            and importlib.util.find_spec(name) is not None)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``import a.b``, ``from .x import y`` with y a module
    or a name, ``from . import x``). Importing a submodule also runs its packages' __init__; those
    implicit edges are left out: a package that imports its own submodules is no cycle."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = ".".join(p for p in (base if node.level else "", node.module or "") if p)
                # `from m import x`: x is m's submodule (m, its package, is an implicit edge), an
                # extension module (outside the graph), or a name m defines.
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names if not _is_extension(f"{source}.{alias.name}", modules)]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan), as a path a -> ... -> a."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_around(graph, group) for group in groups]


def _path_around(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """The shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    return group


def test_the_cycle_finder_sees_function_level_and_from_dot_imports(tmp_path: Path) -> None:
    files = {
        "__init__.py": "from .a import run\n",  # a package importing its submodule: no cycle
        "a.py": "from . import b\ndef run():\n    pass\n",
        "b.py": "import p.sub.c\n",
        "sub/__init__.py": "",
        "sub/c.py": "def later():\n    from ..a import run\n",  # function-level: counts
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .e import E\nfrom . import a\n",
        "e.py": "from .d import x\n",  # back to d only through a TYPE_CHECKING import: no cycle
    }
    for name, text in files.items():
        (tmp_path / "p" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "p" / name).write_text(text)
    graph = import_graph(tmp_path / "p")
    assert graph == {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p.sub.c"}, "p.sub": set(), "p.sub.c": {"p.a"},
                     "p.d": {"p.a"}, "p.e": {"p.d"}}
    assert cycles(graph) == [["p.a", "p.b", "p.sub.c", "p.a"]]


def test_no_python_module_imports_itself_around_a_cycle() -> None:
    graph = import_graph()
    assert "outboard.offload" in graph["outboard.client"]  # the graph sees the package's imports
    found = [" -> ".join(cycle) for cycle in cycles(graph)]
    assert found == [], "import cycles (function-level imports count; TYPE_CHECKING-only ones do not):\n" + \
        "\n".join(found)


def test_the_umbrella_header_includes_every_public_header() -> None:
    umbrella = ROOT / "include" / "outboard" / "outboard.h"
    included = set(re.findall(r'#include "outboard/(\w+\.h)"', umbrella.read_text()))
    public = {f.name for f in (ROOT / "include" / "outboard").glob("*.h")} - {"outboard.h"}
    assert public - included == set()

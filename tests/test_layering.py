"""The import graph of crdt/, node/ and pipeline/ has no cycles, and crdt/ stays pure.

Every module is parsed (nothing is imported) and every ``import`` statement counts, at the
top of a module or inside a function: an import inside a function that closes a cycle is
still a cycle, only a later one.  Imports under ``if TYPE_CHECKING:`` do not count (they
never run).  ``importlib.import_module`` calls are not statements and are not seen (the
command table loads its families that way, ``node/commands/__init__.py``).

Edges of the graph:

- ``import a.b.c`` and ``from a.b import c`` (``c`` a module) lead to ``a.b.c``;
  ``from a.b import name`` (``name`` not a module) leads to ``a.b`` (its ``__init__``);
  relative imports are resolved against the importing module's package;
- importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``: an edge to each of
  them that has code (anything beyond a docstring), except the packages the importing
  module is itself inside, which Python has loaded before the module runs.

Checked:

- the folders' rules (docs/architecture.md): nothing outside node/runtime/ and node/tools/
  (and the shipped test helpers) imports them; only node/transport/ imports grpc; the region
  core, the commands, Redis's formats and RESP import no socket, TLS or process module;
- no module of crdt/, node/, pipeline/ or chaos/ is longer than 800 lines;
- no strongly connected component of more than one module in crdt/, node/, pipeline/
  (each cycle is printed as a chain ``a -> b -> a`` with the line of each import);
- crdt/ imports nothing from node/ or pipeline/, nor a module that does I/O (:data:`IO`);
- the simulation (``chaos.sim``) imports no gRPC;
- chaos/ (and bench/) are only reported, on stdout (``pytest -s``), not asserted.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import deque

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECKED = ("crdt", "node", "pipeline")
REPORTED = ("chaos", "bench")

# What the pure core must not import: modules that do I/O, read the clock or the
# environment, or run things concurrently
IO = frozenset({"os", "socket", "asyncio", "subprocess", "time", "random", "threading", "grpc",
                "ssl", "selectors", "signal", "multiprocessing", "concurrent", "shutil", "tempfile",
                "sys", "io", "pathlib", "logging", "urllib", "http"})


def _module_files(packages: tuple[str, ...]) -> dict[str, str]:
    """Module name -> file, for every ``.py`` under ``packages``."""
    found = {}
    for package in packages:
        for directory, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            if "__init__.py" not in files:
                continue
            rel = os.path.relpath(directory, ROOT).replace(os.sep, ".")
            for name in sorted(files):
                if name.endswith(".py"):
                    module = rel if name == "__init__.py" else f"{rel}.{name[:-3]}"
                    found[module] = os.path.join(directory, name)
    return found


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import statement that can run: (node, inside a function?)."""
    stack = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            children = node.orelse  # the body only runs for a type checker
        else:
            children = list(ast.iter_child_nodes(node))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        stack.extend((child, inner) for child in reversed(children))


def _has_code(tree: ast.Module) -> bool:
    """Does this ``__init__`` do anything beyond a docstring and ``from __future__``?"""
    for i, stmt in enumerate(tree.body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            continue
        return True
    return False


class Graph:
    """The import graph of the modules under some packages."""

    def __init__(self, packages: tuple[str, ...]):
        self.files = _module_files(packages)
        self.trees = {m: _parse(f) for m, f in self.files.items()}
        self.with_code = {m for m, t in self.trees.items() if not self.files[m].endswith("__init__.py") or _has_code(t)}
        # module -> {imported module: [(line, inside a function?)]}
        self.edges: dict[str, dict[str, list[tuple[int, bool]]]] = {m: {} for m in self.files}
        # module -> outside modules imported (top-level names: "os", "grpc"...)
        self.external: dict[str, dict[str, list[int]]] = {m: {} for m in self.files}
        for module, tree in self.trees.items():
            for node, in_function in _imports(tree):
                for target in self._targets(module, node):
                    self._add(module, target, node.lineno, in_function)

    def _package_of(self, module: str) -> str:
        return module if self.files[module].endswith("__init__.py") else module.rpartition(".")[0]

    def _targets(self, module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if node.level:
            base = self._package_of(module)
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.module else base
        else:
            base = node.module or ""
        if base == "__future__":
            return []
        targets = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.append(sub if sub in self.files else base)
        return targets

    def _add(self, module: str, target: str, line: int, in_function: bool) -> None:
        top = target.partition(".")[0]
        if top not in CHECKED + REPORTED:
            lines = self.external[module].setdefault(top, [])
            if line not in lines:
                lines.append(line)
            return
        # the module itself and the packages it is inside ran before this import
        own = {module.rsplit(".", i)[0] for i in range(module.count(".") + 1)}
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in self.files or name == module:
                continue
            if name != target and (name in own or name not in self.with_code):
                continue
            where = self.edges[module].setdefault(name, [])
            if (line, in_function) not in where:
                where.append((line, in_function))

    def components(self) -> list[list[str]]:
        """The strongly connected components of more than one module (Tarjan, iterative)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on_stack: set[str] = set()
        stack: list[str] = []
        found = []
        counter = 0
        for root in sorted(self.edges):
            if root in index:
                continue
            work = [(root, iter(sorted(self.edges[root])))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            while work:
                v, children = work[-1]
                for w in children:
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on_stack.add(w)
                        work.append((w, iter(sorted(self.edges[w]))))
                        break
                    if w in on_stack:
                        low[v] = min(low[v], index[w])
                else:
                    work.pop()
                    if work:
                        low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
        return sorted(found)

    def cycles(self, component: list[str]) -> list[list[str]]:
        """The shortest cycle through each module of ``component`` (duplicates dropped)."""
        members = set(component)
        seen = set()
        chains = []
        for start in component:
            parent = {start: None}
            queue = deque([start])
            end = None
            while queue and end is None:
                v = queue.popleft()
                for w in sorted(self.edges[v]):
                    if w not in members:
                        continue
                    if w == start:
                        end = v
                        break
                    if w not in parent:
                        parent[w] = v
                        queue.append(w)
            chain = [start]
            while end is not None and end != start:
                chain.append(end)
                end = parent[end]
            chain = [start] + chain[:0:-1] + [start]
            key = frozenset(zip(chain, chain[1:], strict=False))
            if key not in seen:
                seen.add(key)
                chains.append(chain)
        return chains

    def describe(self, chain: list[str]) -> str:
        """``a -> b (a.py:12) -> a (b.py:40, in a function)``."""
        text = chain[0]
        for a, b in zip(chain, chain[1:], strict=False):
            where = ", ".join(f"{self.files[a].rpartition(os.sep)[2]}:{line}{' in a function' if f else ''}"
                              for line, f in self.edges[a][b])
            text += f" -> {b} ({where})"
        return text

    def report(self) -> list[str]:
        lines = []
        for component in self.components():
            lines.append(f"{len(component)} modules in a cycle: {', '.join(component)}")
            lines.extend("  " + self.describe(chain) for chain in self.cycles(component))
        return lines


@pytest.fixture(scope="module")
def graph():
    return Graph(CHECKED)


def test_no_import_cycles(graph):
    lines = graph.report()
    assert not lines, "import cycles (see tests/test_layering.py):\n" + "\n".join(lines)


def test_crdt_imports_nothing_above_it(graph):
    wrong = [f"{m} imports {t} (line {', '.join(str(line) for line, _ in where)})"
             for m, targets in graph.edges.items() if m.partition(".")[0] == "crdt"
             for t, where in targets.items() if t.partition(".")[0] != "crdt"]
    assert not wrong, "\n".join(wrong)


def test_crdt_does_no_io(graph):
    wrong = [f"{m} imports {t} (line {', '.join(map(str, lines))})"
             for m, external in graph.external.items() if m.partition(".")[0] == "crdt"
             for t, lines in external.items() if t in IO]
    assert not wrong, "\n".join(wrong)


# The layers that drive the region: nothing below them imports them (docs/architecture.md)
DRIVERS = ("node.runtime", "node.tools")
DRIVERS_MAY_IMPORT = ("node.testing", "node.__main__")  # the shipped test helpers, ``python -m node``
# What a module of these folders may not import: sockets, processes, TLS (the driver's)
SANS_IO = ("node.region", "node.commands", "node.interop", "node.resp")
DRIVER_IO = frozenset({"socket", "selectors", "ssl", "subprocess", "multiprocessing", "grpc"})
LONGEST_MODULE = 800  # lines: a module past it is split by what its parts do


def _inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_nothing_below_the_drivers_imports_them(graph):
    """node/runtime/ (the asyncio server) and node/tools/ (the programs) compose the layers below;
    none of those imports them back."""
    wrong = [f"{m} imports {t} (line {', '.join(str(line) for line, _ in where)})"
             for m, targets in graph.edges.items() if not _inside(m, DRIVERS + DRIVERS_MAY_IMPORT)
             for t, where in targets.items() if _inside(t, DRIVERS)]
    assert not wrong, "\n".join(wrong)


def test_only_the_transport_imports_grpc(graph):
    wrong = [f"{m} imports grpc (line {', '.join(map(str, lines))})"
             for m, external in graph.external.items() if not _inside(m, ("node.transport",))
             for t, lines in external.items() if t == "grpc"]
    assert not wrong, "\n".join(wrong)


def test_the_region_commands_and_formats_open_no_socket(graph):
    """The region core, the commands, Redis's formats and RESP are sans-IO: sockets, TLS and
    processes are the driver's, handed in behind an interface (MIGRATE's transport, say)."""
    wrong = [f"{m} imports {t} (line {', '.join(map(str, lines))})"
             for m, external in graph.external.items() if _inside(m, SANS_IO)
             for t, lines in external.items() if t in DRIVER_IO]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", CHECKED + ("chaos",))
def test_no_module_is_longer_than_800_lines(package):
    long = []
    for _module, path in sorted(_module_files((package,)).items()):
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > LONGEST_MODULE:
            long.append(f"{path[len(ROOT) + 1:]}: {lines} lines")
    assert not long, "\n".join(long)


def test_simulation_loads_no_grpc():
    """The simulation runs real region cores and replication hubs over its own network: gRPC
    (node/transport/grpc_links.py, admin.py) is the server's to hand them, never imported."""
    code = "import chaos.sim, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc'))"
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]", out


def test_report_tools():
    """chaos/ and bench/ are not held to it; their cycles are printed (``pytest -s``)."""
    lines = Graph(CHECKED + REPORTED).report()
    lines = [line for line in lines if any(p in line for p in REPORTED)]
    print("\n".join(["import cycles involving chaos/ or bench/:"] + (lines or ["none"])))


if __name__ == "__main__":
    g = Graph(CHECKED + REPORTED)
    print("\n".join(g.report()) or "no cycles")

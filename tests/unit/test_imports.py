"""No import cycles in src/fwbench: the layers point down only.

Every `import` and `from ... import` counts, wherever it stands (a function's
lazy import is a dependency all the same). Two granularities: modules, and the
parts of the package (fwbench.experiments, fwbench.experiments.droprate, fwbench.ruleset, ...),
where a cycle between two parts is a layer reaching back up even when no two
modules import each other. Registries that import by name at run time
(fwbench.backends, fwbench.experiments) are not edges: that is their point.
"""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root` (a package dir)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        name = ".".join(p.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                # `from pkg import mod` imports the module pkg.mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                # `import a.b.c` runs a and a.b too; the nearest known module counts
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m:
                    graph[m].add(t)
    return graph


def coarsen(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    part = lambda m: ".".join(m.split(".")[:depth])  # noqa: E731
    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(part(m), set()).update(part(t) for t in targets if part(t) != part(m))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) per strongly connected component with
    more than one node; iterative Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(_loop(graph, set(comp)))
    return found


def _loop(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A concrete cycle inside a strongly connected component, to name in the
    failure: breadth-first from its first node back to itself."""
    start = min(comp)
    prev: dict[str, str] = {}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w in comp and w not in prev:
                prev[w] = v
                todo.append(w)
    return sorted(comp)


def test_no_module_imports_itself_back():
    found = cycles(edges(modules(SRC / "fwbench")))
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_part_of_the_package_imports_itself_back():
    found = cycles(coarsen(edges(modules(SRC / "fwbench")), 2))
    assert not found, "parts importing each other: " + \
        "; ".join(" -> ".join(c) for c in found)


def test_the_walk_finds_cycles_lazy_and_relative_ones_too(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy import b\n")
    (pkg / "b.py").write_text("def f():\n    from toy.sub import c\n")   # lazy
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")            # relative
    (pkg / "d.py").write_text("import toy.a\n")
    graph = edges(modules(pkg))
    assert graph["toy.d"] == {"toy.a"}
    assert cycles(graph) == [["toy.a", "toy.b", "toy.sub.c", "toy.a"]]
    # parts: toy.a -> toy.b -> toy.sub -> toy.a
    assert cycles(coarsen(graph, 2)) == [["toy.a", "toy.b", "toy.sub", "toy.a"]]
    (pkg / "sub" / "c.py").write_text("X = 1\n")
    assert cycles(edges(modules(pkg))) == []


# The engine's processes (fwbench.engine's sender and receivers) are started by the
# traffic layer alone, so a send is made, paced and read in one place.
ENGINE = "fwbench.engine"
STARTS = {"Sender", "Receiver", "send"}
STILL_DIRECT: set[str] = set()


def engine_starters(mods: dict[str, Path]) -> set[str]:
    """The modules that name the engine's Sender, Receiver or send."""
    package, _, leaf = ENGINE.rpartition(".")
    out = set()
    for m, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        names = set()       # what the engine module is called in this one
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == ENGINE:
                if STARTS & {a.name for a in node.names}:
                    out.add(m)
            elif isinstance(node, ast.ImportFrom) and node.module == package:
                names |= {a.asname or a.name for a in node.names if a.name == leaf}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr in STARTS):
                continue
            v = node.value
            if (isinstance(v, ast.Name) and v.id in names) or ast.unparse(v) == ENGINE:
                out.add(m)
    return out


def test_only_the_traffic_layer_starts_the_engines_processes():
    found = {m for m in engine_starters(modules(SRC / "fwbench"))
             if m != ENGINE and not m.startswith("fwbench.traffic.")}
    assert found == STILL_DIRECT


def test_the_walk_finds_every_way_of_naming_the_engine(tmp_path):
    pkg = tmp_path / "fwbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("def send(): pass\n")
    (pkg / "a.py").write_text("from fwbench import engine as e\ne.Sender()\n")
    (pkg / "b.py").write_text("from fwbench.engine import send\n")
    (pkg / "c.py").write_text("import fwbench.engine\nfwbench.engine.Receiver()\n")
    (pkg / "d.py").write_text("from fwbench import engine\nengine.version()\n"
                              "class X:\n    def f(self, engine): engine.measurer()\n")
    assert engine_starters(modules(pkg)) == {"fwbench.a", "fwbench.b", "fwbench.c"}

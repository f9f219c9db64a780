"""The shape of the code: imports in minibuild/ and calls between the runtime core's
units point one way (cli -> pipeline -> steps -> report; session -> model -> status),
so no module needs another that needs it back."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from minibuild import build, resources, toolchain

PKG = Path(__file__).resolve().parent.parent / "minibuild"


def import_graph() -> dict[str, set[str]]:
    """minibuild module -> the minibuild modules it imports (anywhere in the file,
    lazy imports inside functions included: they are arrows all the same)."""
    mods = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                # `from . import scan` needs the module scan, not the package's __init__ as well
                names = subs if subs and len(subs) == len(node.names) else [target] + subs
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[m].update(n for n in names if n in mods and n != m)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_minibuild_imports_have_no_cycles():
    assert cycles(import_graph()) == []


def test_steps_never_import_the_driver_or_the_command_line():
    graph = import_graph()
    drivers = {"minibuild.cli", "minibuild.pipeline", "minibuild.size_cli", "minibuild.query", "minibuild.__main__"}
    for m, deps in graph.items():
        if m not in drivers:
            assert not deps & drivers, f"{m} imports {sorted(deps & drivers)}"
    for m in ("minibuild.console", "minibuild.options", "minibuild.errors", "minibuild.domains", "minibuild.dtypes"):
        assert graph[m] <= {"minibuild", "minibuild.errors", "minibuild.platforms"}, (m, graph[m])
    report = {m for m in graph if m == "minibuild.report" or m.startswith("minibuild.report.")}
    for m in report:
        assert graph[m] <= report | {"minibuild", "minibuild.console", "minibuild.errors", "minibuild.fsutil"}, \
            f"the report is a leaf, but {m} imports {sorted(graph[m] - report)}"


def _symbols(obj: Path, nm: str) -> tuple[set[str], set[str]]:
    out = subprocess.run([nm, "-P", str(obj)], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            (undefined if parts[1] == "U" else defined).add(parts[0])
    return defined, undefined


def test_runtime_core_units_call_one_way(tmp_path):
    """Compile each runtime unit and read its symbols: the unit graph (who calls whom)
    has no cycle, e.g. model.c and session.c do not call each other."""
    import shutil
    nm = shutil.which("llvm-nm") or shutil.which("nm")
    if nm is None:
        pytest.skip("no nm on this machine")
    from minibuild import codegen, registry as registry_mod, testing
    reg = registry_mod.load()
    gen = tmp_path / "gen"
    codegen.render(reg, testing.full_manifest(reg), gen)
    src = resources.path("kernels_src")
    units = {}
    for rel in build.RUNTIME_UNITS:
        obj = tmp_path / (Path(rel).stem + ".o")
        subprocess.run([*toolchain.ZIG, "cc", "-target", "x86_64-linux-gnu.2.17", "-c", "-Os", str(src / rel),
                        "-o", str(obj), "-I", str(src / "include"), "-I", str(src / "runtime"), "-I", str(gen)],
                       check=True, capture_output=True, env=build.zig_env())
        units[Path(rel).stem] = _symbols(obj, nm)
    owner = {s: u for u, (defined, _) in units.items() for s in defined}
    graph = {u: {owner[s] for s in undef if s in owner and owner[s] != u} for u, (_, undef) in units.items()}
    assert "model" not in graph["session"] or "session" not in graph["model"]
    assert graph["session"] and cycles(graph) == [], graph

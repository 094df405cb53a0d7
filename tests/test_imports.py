"""The three packages stand alone: ``pyro_subnet`` does not import ``pyro_pt``, ``pyro_arviz``
imports neither plugin (each plugin registers its export with ``pyro_arviz.register``), and
``pyro_pt`` does not import ``pyro_subnet``; and no package's modules import each other in a
cycle.

The source is read with ``ast``, so an import inside a function counts as much as one at the
top of a module (a function-level import hides a dependency, it does not remove it), as does
``importlib.import_module`` or ``__import__`` of a literal name. A fresh interpreter then checks
what importing each package loads.
"""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# package -> the packages it must not import
FORBIDDEN = {"pyro_pt": {"pyro_subnet"}, "pyro_subnet": {"pyro_pt"}, "pyro_arviz": {"pyro_pt", "pyro_subnet"}}


def modules(package):
    """``{module name: path}`` of every module of ``package`` (a package by its own name)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_dynamic_import(node):
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return (name in ("import_module", "__import__") and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def imports(module, path, known=()):
    """``(line, imported module, at module level)`` of every import of ``module``: relative ones
    made absolute; ``from p import a`` gives ``p.a`` where that is a module in ``known``, and
    ``p`` itself where some name comes from ``p``'s own code."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []

    def visit(node, top):
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = package[:len(package) - child.level + 1] if child.level else []
                source = ".".join(base + ([child.module] if child.module else []))
                submodules = [f"{source}.{a.name}" for a in child.names if f"{source}.{a.name}" in known]
                found.extend((child.lineno, name, top) for name in submodules)
                if len(submodules) < len(child.names):
                    found.append((child.lineno, source, top))
            elif isinstance(child, ast.Call) and _is_dynamic_import(child):
                found.append((child.lineno, child.args[0].value, False))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def foreign_imports(package):
    """``"module:line imports name"`` for each import of a package ``package`` must not import."""
    return [f"{module}:{line} imports {name}"
            for module, path in modules(package).items()
            for line, name, _ in imports(module, path)
            if name.split(".")[0] in FORBIDDEN[package]]


def import_cycles(package):
    """The groups of ``package``'s modules that import each other at module level, in a cycle
    (strongly connected components of the import graph, Tarjan's algorithm)."""
    known = modules(package)
    graph = {m: sorted({name for _, name, top in imports(m, p, known) if top and name in known and name != m})
             for m, p in known.items()}
    index, low, stack, cycles = {}, {}, [], []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in index:
            connect(v)
    return sorted(cycles)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_what_it_must_not(package):
    assert foreign_imports(package) == []


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_cycle_inside_a_package(package):
    assert import_cycles(package) == []


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_importing_a_package_loads_none_it_must_not(package):
    loaded = ("import sys, {0}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & {1!r})))"
              .format(package, set(FORBIDDEN)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", loaded], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == {package} | ({"pyro_arviz"} if package != "pyro_arviz" else set())


def test_the_guard_reads_every_import(tmp_path, monkeypatch):
    # A package with each way of importing: at the top, relative, inside a function, by name,
    # and two modules importing each other. A guard that read nothing would pass it.
    planted = tmp_path / "planted"
    (planted / "sub").mkdir(parents=True)
    (planted / "__init__.py").write_text("from . import a\n")
    (planted / "a.py").write_text("import pyro_pt\nfrom .sub import b\n")
    (planted / "sub" / "__init__.py").write_text("")
    (planted / "sub" / "b.py").write_text(
        "import importlib\n"
        "from ..a import f\n"
        "def g():\n"
        "    from pyro_subnet.guide import SubnetworkLaplace\n"
        "    return importlib.import_module('pyro_pt.kernel')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setitem(FORBIDDEN, "planted", {"pyro_pt", "pyro_subnet"})
    assert foreign_imports("planted") == [
        "planted.a:1 imports pyro_pt",
        "planted.sub.b:4 imports pyro_subnet.guide",
        "planted.sub.b:5 imports pyro_pt.kernel",
    ]
    assert import_cycles("planted") == [["planted.a", "planted.sub.b"]]

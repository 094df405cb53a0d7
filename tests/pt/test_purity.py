"""The pure parts of pyro_pt import neither Pyro's inference machinery nor torch.distributed.

Each module is loaded in a fresh interpreter under a bare ``pyro_pt`` package (its
``__init__``, which pulls in the kernel, is not run), so the check sees what the module itself
and the pyro_pt modules it imports bring in. One interpreter imports torch and then forks a
child per module (where ``os.fork`` exists): each child starts from exactly the state of a
fresh interpreter that has imported torch, without paying torch's import again.
``import torch`` loads ``torch.distributed`` by itself, so that name is also checked in the
sources: no pure module, nor a pyro_pt module it imports, names it.
"""

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pyro_pt"
PURE = ("swap", "ladder", "recorders", "lineages", "random", "barrier", "health", "shortfall")
FORBIDDEN = ("pyro.infer", "torch.distributed")

PROBE = """
import importlib, json, os, sys, types
import torch  # the baseline: what torch itself loads


def probe(name):
    before = set(sys.modules)
    package = types.ModuleType("pyro_pt")
    package.__path__ = [{path!r}]
    sys.modules["pyro_pt"] = package
    importlib.import_module("pyro_pt." + name)
    return sorted(set(sys.modules) - before)


names = {names!r}
if not hasattr(os, "fork"):
    assert len(names) == 1, "one module per interpreter without os.fork"
    print(json.dumps({{names[0]: probe(names[0])}}))
    sys.exit(0)
out = {{}}
for name in names:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a copy of this interpreter just after `import torch`
        os.close(read)
        try:
            result = probe(name)
        except BaseException as error:
            result = {{"error": repr(error)}}
        with os.fdopen(write, "w") as pipe:
            pipe.write(json.dumps(result))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        out[name] = json.loads(pipe.read())
    _, status = os.waitpid(pid, 0)
    assert status == 0 and not isinstance(out[name], dict), (name, out[name])
print(json.dumps(out))
"""


def _probe(names):
    """{name: modules loaded by importing pyro_pt.<name> after torch}, each in a clean state:
    a forked child per module of one interpreter, or an interpreter per module without fork."""
    groups = [list(names)] if hasattr(os, "fork") else [[name] for name in names]
    loaded = {}
    for group in groups:
        out = subprocess.run([sys.executable, "-c", PROBE.format(path=str(PACKAGE), names=group)],
                             capture_output=True, text=True, check=True)
        loaded.update(json.loads(out.stdout))
    return loaded


def _imports(name, seen=None):
    """The pyro_pt modules ``name`` imports, transitively, and every module name they import."""
    seen = set() if seen is None else seen
    seen.add(name)
    names = set()
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                inner = [node.module] if node.module else [a.name for a in node.names]
                for module in inner:
                    if module not in seen and (PACKAGE / f"{module}.py").exists():
                        names |= _imports(module, seen)
            elif node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _forbidden(names):
    return sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in FORBIDDEN))


@pytest.fixture(scope="module")
def probed():
    """What each pure module and the kernel (the check's own positive control) load."""
    return _probe(PURE + ("kernel",))


@pytest.mark.parametrize("name", PURE)
def test_pure_module_loads_no_inference_or_distributed_code(name, probed):
    loaded = probed[name]
    assert f"pyro_pt.{name}" in loaded
    assert not any(m == "pyro_pt.kernel" or m.startswith("pyro_pt.explorers") for m in loaded)
    assert _forbidden(loaded) == []
    assert _forbidden(_imports(name)) == []


def test_the_checks_see_a_forbidden_import(probed):
    # The same checks on a module that does import them (the kernel) find both names.
    found = _forbidden(_imports("kernel"))
    assert "torch.distributed" in found  # through pyro_pt.comm
    assert "pyro.infer.mcmc.mcmc_kernel" in found
    assert "pyro.infer" in probed["kernel"]


def test_the_probes_do_not_share_state(probed):
    # Each module's probe starts clean: both modules that import pyro_pt.barrier list it
    # (probed one after the other in one interpreter, the second would not), and so does the
    # kernel's probe, run last.
    for name in ("barrier", "ladder", "recorders", "kernel"):
        assert "pyro_pt.barrier" in probed[name], name


def test_every_pyro_pt_module_comes_from_this_tree():
    # An editable install of another checkout answers imports of module names this tree no
    # longer has (a renamed module imported by its old name would silently load the old code).
    import pyro_pt  # noqa: F401  (the whole package: kernel, explorers, potential, plot, arviz)
    import pyro_pt.plot  # noqa: F401

    outside = [(name, module.__file__) for name, module in list(sys.modules.items())
               if name.startswith("pyro_pt") and getattr(module, "__file__", None)
               and not pathlib.Path(module.__file__).resolve().is_relative_to(PACKAGE)]
    assert outside == []

"""The pure parts of pyro_pt import neither Pyro's inference machinery nor torch.distributed.

Each module is loaded in a fresh interpreter under a bare ``pyro_pt`` package (its
``__init__``, which pulls in the kernel, is not run), so the check sees what the module itself
and the pyro_pt modules it imports bring in. ``import torch`` loads ``torch.distributed`` by
itself, so that name is also checked in the sources: no pure module, nor a pyro_pt module it
imports, names it.
"""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pyro_pt"
PURE = ("swap", "ladder", "recorders", "random", "barrier", "health")
FORBIDDEN = ("pyro.infer", "torch.distributed")

PROBE = """
import importlib, json, sys, types
import torch  # the baseline: what torch itself loads
before = set(sys.modules)
package = types.ModuleType("pyro_pt")
package.__path__ = [{path!r}]
sys.modules["pyro_pt"] = package
importlib.import_module("pyro_pt.{name}")
print(json.dumps(sorted(set(sys.modules) - before)))
"""


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


@pytest.mark.parametrize("name", PURE)
def test_pure_module_loads_no_inference_or_distributed_code(name):
    out = subprocess.run([sys.executable, "-c", PROBE.format(path=str(PACKAGE), name=name)],
                         capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert f"pyro_pt.{name}" in loaded
    assert not any(m == "pyro_pt.kernel" or m.startswith("pyro_pt.explorers") for m in loaded)
    assert _forbidden(loaded) == []
    assert _forbidden(_imports(name)) == []


def test_the_checks_see_a_forbidden_import():
    # The same checks on a module that does import them (the kernel) find both names.
    found = _forbidden(_imports("kernel"))
    assert "torch.distributed" in found  # through pyro_pt.comm
    assert "pyro.infer.mcmc.mcmc_kernel" in found
    out = subprocess.run([sys.executable, "-c", PROBE.format(path=str(PACKAGE), name="kernel")],
                         capture_output=True, text=True, check=True)
    assert "pyro.infer" in json.loads(out.stdout)


def test_every_pyro_pt_module_comes_from_this_tree():
    # An editable install of another checkout answers imports of module names this tree no
    # longer has (a renamed module imported by its old name would silently load the old code).
    import pyro_pt  # noqa: F401  (the whole package: kernel, explorers, potential, plot, arviz)
    import pyro_pt.plot  # noqa: F401

    outside = [(name, module.__file__) for name, module in list(sys.modules.items())
               if name.startswith("pyro_pt") and getattr(module, "__file__", None)
               and not pathlib.Path(module.__file__).resolve().is_relative_to(PACKAGE)]
    assert outside == []

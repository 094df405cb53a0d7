"""Every warning the packages issue is in the package's own category, so that one filter
(``warnings.simplefilter("error", TemperingWarning)``, or ``SubnetWarning``) reaches them all.

The source is read with ``ast``: each call of ``warnings.warn`` (or a bare ``warn``) must pass a
category, by position or by keyword, that names a subclass of its package's base category;
``pyro_arviz`` has none of its own, so it must not warn at all.
"""

import ast
import importlib
import pathlib
import sys

import pytest

import pyro_pt
import pyro_subnet

ROOT = pathlib.Path(__file__).resolve().parents[1]
# package -> its base category (None: the package has no category and must not warn)
BASES = {"pyro_pt": pyro_pt.TemperingWarning, "pyro_subnet": pyro_subnet.SubnetWarning,
         "pyro_arviz": None}
WARN_FUNCTIONS = {"warn", "warn_explicit"}


def _is_warn_call(node):
    func = node.func
    if isinstance(func, ast.Attribute):
        return (func.attr in WARN_FUNCTIONS and isinstance(func.value, ast.Name)
                and func.value.id == "warnings")
    return isinstance(func, ast.Name) and func.id == "warn"


def _category_expression(node):
    for keyword in node.keywords:
        if keyword.arg == "category":
            return keyword.value
    return node.args[1] if len(node.args) > 1 else None


def _resolve(expression, module):
    """The object a category expression (``Name`` or dotted ``Attribute``) names in ``module``."""
    if isinstance(expression, ast.Name):
        return getattr(module, expression.id, None)
    if isinstance(expression, ast.Attribute):
        owner = _resolve(expression.value, module)
        return getattr(owner, expression.attr, None) if owner is not None else None
    return None


def warn_calls(package):
    """``(module name, line, category expression or None)`` of every warn call in ``package``."""
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _is_warn_call(node):
                out.append((module.removesuffix(".__init__"), node.lineno, _category_expression(node)))
    return out


def stray_warnings(package):
    """The warn calls of ``package`` whose category is missing or not the package's."""
    base, stray = BASES[package], []
    for module_name, line, expression in warn_calls(package):
        where = f"{module_name}:{line}"
        if expression is None:
            stray.append(f"{where} passes no category (a plain UserWarning)")
            continue
        category = _resolve(expression, importlib.import_module(module_name))
        if base is None or not (isinstance(category, type) and issubclass(category, base)):
            stray.append(f"{where} warns with {ast.unparse(expression)}, not a subclass of "
                         f"{base.__name__ if base else 'a category of the package (it has none)'}")
    return stray


@pytest.mark.parametrize("package", sorted(BASES))
def test_every_warning_is_in_its_package_category(package):
    assert stray_warnings(package) == []


def test_the_guard_finds_every_warn_call():
    # The known calls are found (a guard that reads nothing would pass any package).
    pt = {(module, expression and ast.unparse(expression))
          for module, _, expression in warn_calls("pyro_pt")}
    assert ("pyro_pt.report", "TemperingWarning") in pt
    assert ("pyro_pt.setup", "TemperingWarning") in pt
    subnet = {module for module, _, _ in warn_calls("pyro_subnet")}
    assert {"pyro_subnet.evidence", "pyro_subnet.selection", "pyro_subnet.variance"} <= subnet


def test_the_guard_flags_a_plain_or_foreign_category(tmp_path, monkeypatch):
    # A package with one plain warning, one foreign category and one of its own.
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import warnings\n"
        "class PlantedWarning(UserWarning):\n    pass\n"
        "def f():\n"
        "    warnings.warn('plain')\n"
        "    warnings.warn('foreign', RuntimeWarning)\n"
        "    warnings.warn('own', category=PlantedWarning)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    planted = importlib.import_module("planted")
    monkeypatch.setitem(BASES, "planted", planted.PlantedWarning)
    assert stray_warnings("planted") == [
        "planted:5 passes no category (a plain UserWarning)",
        "planted:6 warns with RuntimeWarning, not a subclass of PlantedWarning",
    ]

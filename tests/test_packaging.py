"""The wheel built from this tree holds every package, module and run-time source file.

The rest of the suite runs on the editable install, which imports straight from the tree and so
cannot notice a package that the wheel leaves out. ``make test-wheel`` installs the wheel into a
fresh venv and runs the README's quickstarts; this is the fast check that runs with the suite.
"""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["pyro_pt", "pyro_subnet", "pyro_arviz"]


def ignore(dirpath, names):
    """What a fresh clone does not have: build outputs and venvs (they would slow the copy down,
    and a stale build/lib would put files into the wheel that the configuration leaves out)."""
    skip = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    if os.path.samefile(dirpath, ROOT):
        skip |= {n for n in names if n.startswith(".venv")}
        skip |= {".git", "build", "dist", ".pytest_cache"} & set(names)
    return skip


def tree_files():
    """Paths (relative to the root, with "/") that the wheel must hold: every module (so every
    package's __init__.py) under the three packages, and the C++ sources compiled at run time."""
    wanted = []
    for package in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, package)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, ROOT).replace(os.sep, "/")
            wanted += [f"{rel}/{name}" for name in filenames if name.endswith(".py")]
            if rel == "pyro_pt/potential":
                wanted += [f"{rel}/{name}" for name in filenames if name.endswith(".cpp")]
    return sorted(wanted)


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory):
    """The file names in a wheel built, offline, from a copy of the tree."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, out = tmp / "src", tmp / "dist"
    shutil.copytree(ROOT, src, ignore=ignore)
    out.mkdir()
    # setuptools' PEP 517 backend, as pip calls it, in its own process: setuptools keeps global
    # state, and the build's output stays out of the test log unless it fails
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    proc = subprocess.run(
        [sys.executable, "-c", build, str(out)], cwd=src, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}"
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_tree_has_the_packages():
    wanted = tree_files()
    for package in PACKAGES:
        assert f"{package}/__init__.py" in wanted
    assert "pyro_pt/potential/matmul.cpp" in wanted


def test_wheel_holds_every_package_module_and_cpp(wheel_names):
    missing = [path for path in tree_files() if path not in wheel_names]
    assert not missing, (
        f"the wheel lacks {missing}: pyproject.toml's [tool.setuptools.packages.find] must find "
        "every directory under the packages, and [tool.setuptools.package-data] list their data "
        "files"
    )


def test_wheel_holds_nothing_else_at_the_top(wheel_names):
    top = {name.split("/")[0] for name in wheel_names}
    dist_info = {name for name in top if name.endswith(".dist-info")}
    assert len(dist_info) == 1
    assert top - dist_info == set(PACKAGES)

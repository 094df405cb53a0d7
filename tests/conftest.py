"""Settings every test shares."""

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def own_compile_records(tmp_path_factory):
    """compile="auto" reads and writes its records of compile costs in a file of each test's own
    (spawned ranks inherit it), never the machine's nor another test's: a cheap record left by a
    benchmark, or by a test's compile="inductor" set-up, would make a later test's run switch to
    Inductor, and its draws differ with the order the tests ran in."""
    before = os.environ.get("PYRO_PT_COMPILE_RECORDS")
    os.environ["PYRO_PT_COMPILE_RECORDS"] = str(tmp_path_factory.mktemp("compile") / "records.json")
    yield
    if before is None:
        del os.environ["PYRO_PT_COMPILE_RECORDS"]
    else:
        os.environ["PYRO_PT_COMPILE_RECORDS"] = before


@pytest.fixture(scope="module", autouse=True)
def module_keeps_the_default_dtype():
    """Every test module starts with the default dtype the one before found: a module fixture
    that sets float64 for its reference computations must not reach the next module (under
    pytest-xdist the modules of both packages share a worker in any order)."""
    previous = torch.get_default_dtype()
    yield
    torch.set_default_dtype(previous)


@pytest.fixture
def float64():
    """Tensors made without a dtype are float64 within the test (exact comparisons)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)

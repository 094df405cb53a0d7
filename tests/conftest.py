"""Settings every test shares."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def own_compile_records(tmp_path_factory):
    """compile="auto" reads and writes its records of compile costs in a file of the suite's own
    (spawned ranks inherit it), never the machine's: a cheap record left there by a benchmark
    would make a test's run switch to Inductor, and its draws differ."""
    before = os.environ.get("PYRO_PT_COMPILE_RECORDS")
    os.environ["PYRO_PT_COMPILE_RECORDS"] = str(tmp_path_factory.mktemp("compile") / "records.json")
    yield
    if before is None:
        del os.environ["PYRO_PT_COMPILE_RECORDS"]
    else:
        os.environ["PYRO_PT_COMPILE_RECORDS"] = before

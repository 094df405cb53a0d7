import pyro
import pytest
import torch


@pytest.fixture(autouse=True)
def float64_and_seed():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    yield
    torch.set_default_dtype(old)

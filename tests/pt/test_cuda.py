"""ParallelTempering with the model on a GPU (skipped without CUDA; run on a device machine)."""

import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering

from .models import NOISE, PRIOR_SCALE, linear_data, linear_posterior

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def cuda_linear_model(x, y):
    zero = torch.zeros(2, dtype=x.dtype, device=x.device)
    w = pyro.sample("w", dist.Normal(zero, PRIOR_SCALE).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(w @ x.T, NOISE), obs=y)


def run(explorer, kwargs, seed=0, num_samples=1000, max_temperature=10.0):
    x, y = (t.cuda() for t in linear_data())
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(cuda_linear_model, num_replicas=3,
                               max_temperature=max_temperature, explorer=explorer,
                               explorer_kwargs=kwargs)
    mcmc = MCMC(kernel, num_samples, num_samples // 2, disable_progbar=True)
    mcmc.run(x, y)
    return kernel, mcmc


@pytest.mark.parametrize("explorer, kwargs, max_temperature", [
    ("hmc", {"num_steps": 4}, 10.0),
    ("hmc", {"num_steps": 4}, math.inf),
    ("nuts", {"max_tree_depth": 3}, 10.0),
])
def test_cold_chain_on_cuda_matches_the_conjugate_posterior(explorer, kwargs, max_temperature):
    kernel, mcmc = run(explorer, kwargs, max_temperature=max_temperature)
    w = mcmc.get_samples()["w"]
    assert w.device.type == "cuda"
    w = w.cpu()
    mean, cov = linear_posterior(*linear_data())
    ess = effective_sample_size(w.unsqueeze(0)).min()
    sd = cov.diagonal().sqrt()
    assert ((w.mean(0) - mean) / (sd / ess.sqrt())).abs().max() < 4.0
    cov_z = (torch.cov(w.T) - cov) / sd.outer(sd) / math.sqrt(2 / ess)
    assert cov_z.abs().max() < 4.0
    assert min(mcmc.diagnostics()["swap_acceptance"]["chain 0"]) > 0.2


def test_seeded_cuda_runs_repeat_exactly():
    _, first = run("hmc", {"num_steps": 4}, num_samples=100)
    _, second = run("hmc", {"num_steps": 4}, num_samples=100)
    assert torch.equal(first.get_samples()["w"], second.get_samples()["w"])

"""The prior rung's draws without a trace (pyro_pt.potential.priors): exact draws, the same ll
as the trace's, and the trace kept where a prior reads another latent."""

import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.potential import FunctionalSplit, ModelSplit
from pyro_pt.potential.priors import DirectPrior, fixed_priors

from .models import constrained_model, linear_data, linear_model


def centred_hierarchy(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfNormal(2.0))
    with pyro.plate("groups", y.shape[0]):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("y", dist.Normal(theta, 1.0), obs=y)


def _y():
    return torch.tensor([0.3, -1.2, 2.5, 0.8])


def test_draws_have_the_prior_in_unconstrained_space_and_the_traces_ll():
    """loc ~ N(0, 5), log(scale) ~ N(0, 1), frac ~ Beta(2, 3): the unconstrained draws' moments
    against exact ones (a draw left constrained, or a transform lost, moves log(scale)'s mean
    from 0 to 1.65), and each draw's ll is the trace's at the same point."""
    y = _y()
    split = ModelSplit(constrained_model, (y,))
    prior = DirectPrior(FunctionalSplit(split, compile="torchscript"))
    assert prior.path == "direct" and prior.reason == ""
    pyro.set_rng_seed(0)
    draws = [prior() for _ in range(4000)]
    loc = torch.stack([z["loc"] for z, _ in draws])
    log_scale = torch.stack([z["scale"] for z, _ in draws])
    frac = torch.sigmoid(torch.stack([z["frac"] for z, _ in draws]))
    n = len(draws)
    for values, mean, sd in ((loc, 0.0, 5.0), (log_scale, 0.0, 1.0), (frac, 0.4, 0.2)):
        assert abs(float(values.mean()) - mean) < 4 * sd / math.sqrt(n)
        assert abs(float(values.std()) - sd) < 0.06 * sd
    for z, ll in draws[:20]:
        assert float(ll) == pytest.approx(split.log_likelihood(z), rel=1e-5, abs=1e-6)


def test_a_prior_that_reads_another_latent_keeps_the_trace():
    split = ModelSplit(centred_hierarchy, (_y(),))
    priors, why = fixed_priors(split)
    assert priors is None and "'theta'" in why
    prior = DirectPrior(FunctionalSplit(split, compile="torchscript"))
    assert prior.path == "traced"
    pyro.set_rng_seed(1)
    z, ll = prior()
    assert set(z) == {"mu", "tau", "theta"} and math.isfinite(float(ll))


def test_the_check_leaves_the_random_state_as_it_was():
    split = ModelSplit(constrained_model, (_y(),))
    before = torch.get_rng_state()
    fixed_priors(split)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.filterwarnings("ignore::UserWarning")  # a few scans of a tiny ladder
@pytest.mark.parametrize("model, args, path", [
    (linear_model, linear_data(), "direct"),
    (centred_hierarchy, (_y(),), "traced"),
])
def test_the_kernel_says_how_the_prior_rung_draws(model, args, path):
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(model, num_replicas=3, explorer_kwargs={"num_steps": 2},
                               adapt_temperatures=False)
    MCMC(kernel, num_samples=3, warmup_steps=2, disable_progbar=True).run(*args)
    assert kernel.explorer_info["prior_draws"] == path
    assert ("'theta'" in kernel.explorer_info.get("prior_draws_reason", "")) == (path == "traced")


def test_the_prior_rung_hands_out_pooled_draws_of_the_prior():
    """The prior rung's draws, made 64 at a time: their moments against the exact prior's, each
    draw's ll the trace's, and a pool refilled from the rung's own stream (two rungs of the same
    seed draw the same)."""
    from pyro_pt.explorers.prior import PriorExplorer, pool_size
    from pyro_pt.random import RandomStream

    split = ModelSplit(constrained_model, (_y(),))
    fast = FunctionalSplit(split, compile="torchscript")
    rungs = [PriorExplorer(RandomStream(7), fast) for _ in range(2)]
    assert pool_size(fast.dim) == 64
    draws = [rungs[0].move(None) for _ in range(3000)]
    twin = [rungs[1].move(None) for _ in range(130)]
    assert all(torch.equal(a["loc"], b["loc"]) for (a, _), (b, _) in zip(draws, twin))
    log_scale = torch.stack([z["scale"] for z, _ in draws])
    loc = torch.stack([z["loc"] for z, _ in draws])
    n = len(draws)
    assert abs(float(log_scale.mean())) < 4 / math.sqrt(n)
    assert abs(float(loc.std()) - 5.0) < 0.3
    # consecutive pools are not the same draws
    assert not torch.equal(loc[:64], loc[64:128])
    for z, ll in draws[60:70]:  # across a refill
        assert ll == pytest.approx(split.log_likelihood(dict(z)), rel=1e-5, abs=1e-6)

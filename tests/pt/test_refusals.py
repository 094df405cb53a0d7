"""What Pyro's HMC and NUTS refuse (``pyro.infer.mcmc.util.initialize_model``),
ParallelTempering refuses at set-up too, before any rung is built or any scan runs, naming the
site and what to do; what they accept, it accepts with the same log density."""

import math

import pytest
import torch

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.potential import ModelSplit

# the runs are short: their end-of-run review is not what these tests look at
pytestmark = pytest.mark.filterwarnings("ignore::pyro_pt.TemperingWarning")

Y = torch.linspace(-1.0, 1.0, 20)


def random_subsample(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y), subsample_size=5) as idx:
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y[idx])


def random_subsample_of_latents(y):
    with pyro.plate("latents", 10, subsample_size=4):
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(theta.sum(), 1.0), obs=y[0])


def sequential_subsample(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    for i in pyro.plate("rows", len(y), subsample_size=3):
        pyro.sample(f"y_{i}", dist.Normal(mu, 1.0), obs=y[i])


def fixed_subsample(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y), subsample=torch.tensor([1, 4, 7])) as idx:
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y[idx])


def whole_subsample(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y), subsample_size=len(y)) as idx:
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y[idx])


def improper(y):
    mu = pyro.sample("mu", dist.ImproperUniform(dist.constraints.real, (), ()))
    pyro.sample("y", dist.Normal(mu, 1.0), obs=y[0])


def poisson_latent(y):
    k = pyro.sample("k", dist.Poisson(3.0))
    pyro.sample("y", dist.Normal(k, 1.0), obs=y[0])


def enumerated_latent(y):
    k = pyro.sample("k", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
    pyro.sample("y", dist.Normal(2.0 * k, 1.0), obs=y[0])


def kernel_of(model, **kwargs):
    return ParallelTempering(model, num_replicas=2, explorer="rwmh", **kwargs)


def run(kernel):
    """A short run of ``kernel``; a refusal leaves its rungs None (none was built)."""
    pyro.set_rng_seed(0)
    MCMC(kernel, 5, 5, disable_progbar=True).run(Y)
    return kernel


@pytest.mark.parametrize("model, plate, sites", [
    (random_subsample, "data", r"\['y'\]"),
    (random_subsample_of_latents, "latents", r"\['theta'\]"),
    (sequential_subsample, "rows", r"\['y_\d+', 'y_\d+', 'y_\d+'\]"),
])
def test_a_random_subsample_is_refused_at_set_up_naming_the_plate(model, plate, sites):
    kernel = kernel_of(model)
    with pytest.raises(NotImplementedError, match=(
            rf"plate '{plate}' draws a random subsample of \d+ of its \d+ indices on every run of "
            rf"the model \(subsample_size=\d+; its sites {sites}\)")) as caught:
        run(kernel)
    message = str(caught.value)
    assert "use the whole data (leave out subsample_size)" in message
    assert "pyro.infer.SVI" in message and "pyro_subnet.SubnetworkLaplace" in message
    assert kernel.run is None  # refused before any rung was built
    if model is not random_subsample_of_latents:  # (Pyro's own first trace fails on that one)
        with pytest.raises(NotImplementedError, match="does not support model with subsample"):
            MCMC(NUTS(model), 5, 5, disable_progbar=True).run(Y)


@pytest.mark.parametrize("model, scale", [(fixed_subsample, 20 / 3), (whole_subsample, 1.0)])
def test_a_fixed_or_whole_subsample_is_one_log_density_and_runs(model, scale):
    # Pyro's NUTS accepts these too: the indices are the same on every run.
    split = ModelSplit(model, (Y,))
    assert split.random_subsamples == {}
    idx = torch.tensor([1, 4, 7]) if model is fixed_subsample else torch.arange(20)
    expected = scale * dist.Normal(0.3, 1.0).log_prob(Y[idx]).sum()
    assert float(split.log_densities({"mu": torch.tensor(0.3)})[1]) == pytest.approx(
        float(expected), rel=1e-6)
    assert run(kernel_of(model)).run is not None


def test_an_improper_prior_without_a_starting_value_names_the_site():
    kernel = kernel_of(improper)
    with pytest.raises(ValueError, match=(
            r"latent site 'mu' has an improper prior \(ImproperUniform\), which cannot be drawn "
            r"from, and init_strategy=init_to_uniform starts from a draw of the prior: pass "
            r"init_strategy=init_to_value\(values=\{'mu': <a starting value>\}\)")):
        run(kernel)
    assert kernel.run is None
    with pytest.raises(NotImplementedError, match="ImproperUniform does not support sampling"):
        MCMC(NUTS(improper), 5, 5, disable_progbar=True).run(Y)  # Pyro's, for comparison
    # with a starting value it runs, to a finite hot end (the prior cannot be drawn either)
    started = kernel_of(improper, init_strategy=init_to_value(values={"mu": torch.tensor(0.0)}))
    with pytest.warns(TemperingWarning, match="'mu' has an improper prior"):
        kernel = run(started)
    assert kernel.run is not None and math.isfinite(kernel.temperatures[-1])


@pytest.mark.parametrize("model, family", [(poisson_latent, "Poisson"),
                                           (enumerated_latent, "Bernoulli")])
def test_a_discrete_latent_is_refused_naming_the_site(model, family):
    kernel = kernel_of(model)
    # Pyro's NUTS refuses the Poisson and enumerates the Bernoulli; tempering cannot enumerate.
    with pytest.raises(TypeError, match=rf"latent site 'k' is discrete \({family}\): discrete "
                                        r"latents are unsupported by ParallelTempering"):
        run(kernel)
    assert kernel.run is None


def test_an_enumerate_annotation_on_a_continuous_site_changes_nothing():
    # Pyro's NUTS raises a bare NotImplementedError here (a Normal has no enumerate_support);
    # the annotation is for discrete sites, and the split's log density is the model's.
    def annotated(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0), infer={"enumerate": "parallel"})
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    def plain(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    z = {"mu": torch.tensor(0.4)}
    got = ModelSplit(annotated, (Y,)).log_densities(z)
    want = ModelSplit(plain, (Y,)).log_densities(z)
    assert [float(t) for t in got] == [float(t) for t in want]
    assert float(got[1]) == pytest.approx(float(dist.Normal(0.4, 1.0).log_prob(Y).sum()), rel=1e-6)
    assert run(kernel_of(annotated)).run is not None


def test_a_scaled_observed_plate_is_scaled_in_the_likelihood():
    # Pyro's HMC multiplies the log density by poutine.scale; so does the split (not the prior).
    def scaled(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)), poutine.scale(scale=2.5):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    lp, ll = ModelSplit(scaled, (Y,)).log_densities({"mu": torch.tensor(0.4)})
    assert float(ll) == pytest.approx(2.5 * float(dist.Normal(0.4, 1.0).log_prob(Y).sum()), rel=1e-6)
    assert float(lp) == pytest.approx(float(dist.Normal(0.0, 1.0).log_prob(torch.tensor(0.4))))

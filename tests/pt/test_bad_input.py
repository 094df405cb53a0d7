"""Bad input gets a clear error naming the argument or site; numeric failures are rejections."""

import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value

from pyro_pt import ParallelTempering

from .models import linear_data, linear_model


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"temperatures": [2.0, 4.0]}, ValueError, "start at 1.0"),
        ({"temperatures": [1.0, 3.0, 2.0]}, ValueError, "increase"),
        ({"max_temperature": 1.0}, ValueError, "max_temperature"),
        ({"max_temperature": 0.3}, ValueError, "max_temperature"),
        ({"num_replicas": 1}, ValueError, "num_replicas"),
        ({"explorer": "gibbs"}, ValueError, "explorer"),
        ({"swap_scheme": "random"}, ValueError, "swap_scheme"),
        ({"swap_interval": 0}, ValueError, "swap_interval"),
        ({"swap_interval": 1.5}, TypeError, "swap_interval"),
        ({"explorer_kwargs": [1]}, TypeError, "explorer_kwargs"),
        ({"adapt_temperatures": "yes"}, TypeError, "adapt_temperatures"),
        ({"max_temperature": "10"}, TypeError, "max_temperature must be a number"),
        ({"temperatures": ["1", "2"]}, TypeError, "temperatures must be a number"),
        ({"temperatures": [1.0, 2.0, 4.0], "num_replicas": 8}, ValueError,
         "conflicting ladder arguments: temperatures has 3 rungs but num_replicas=8"),
        ({"temperatures": [1.0, 2.0, 4.0], "max_temperature": 50.0}, ValueError,
         "conflicting ladder arguments: temperatures ends at 4.0 but max_temperature=50.0"),
        ({"explorer": NUTS(linear_model)}, TypeError, "pass the class .explorer=NUTS."),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ParallelTempering(linear_model, **kwargs)


def test_model_must_be_callable():
    with pytest.raises(TypeError, match="model"):
        ParallelTempering("linear_model")


def setup(kernel, *args):
    pyro.set_rng_seed(0)
    kernel.setup(0, *args)


def test_model_errors_name_the_site():
    def no_obs():
        pyro.sample("mu", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="no observed site"):
        setup(ParallelTempering(no_obs))

    def discrete():
        k = pyro.sample("k", dist.Categorical(torch.ones(3)))
        pyro.sample("y", dist.Normal(k.float(), 1.0), obs=torch.tensor(0.0))

    with pytest.raises(TypeError, match="'k' is discrete .Categorical.: discrete latents are "
                       "unsupported") as caught:
        setup(ParallelTempering(discrete))
    assert "marginalize it" in str(caught.value) and "enumerate" in str(caught.value)

    def improper():
        mu = pyro.sample("mu", dist.ImproperUniform(dist.constraints.real, (), ()))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=torch.tensor(0.0))

    init = init_to_value(values={"mu": torch.tensor(0.0)})
    with pytest.raises(ValueError, match="'mu' has an improper prior"):
        setup(ParallelTempering(improper, max_temperature=math.inf, init_strategy=init))
    # A finite ladder is fine with an improper prior.
    setup(ParallelTempering(improper, num_replicas=2, init_strategy=init, explorer="rwmh"))


def test_explorer_kwargs_typo_is_reported():
    with pytest.raises(TypeError, match="explorer_kwargs .* 'nuts'"):
        setup(ParallelTempering(linear_model, explorer="nuts",
                                explorer_kwargs={"max_tree_dpth": 3}), *linear_data())
    # NUTS's options with the default explorer (the batched HMC) say how to get NUTS
    with pytest.raises(TypeError, match=r"\['max_tree_depth'\] are options of Pyro's NUTS: "
                                        r"pass explorer='nuts'"):
        ParallelTempering(linear_model, explorer_kwargs={"max_tree_depth": 3})


def nan_region_model():
    # The log density is NaN for theta > 1: every move there must be rejected.
    theta = pyro.sample("theta", dist.Normal(0.0, 2.0))
    log_lik = -0.5 * (theta - 0.5) ** 2
    pyro.factor("lik", torch.where(theta > 1.0, torch.full_like(log_lik, math.nan), log_lik))


@pytest.mark.parametrize("explorer", ["rwmh", "hmc", "nuts"])
@pytest.mark.parametrize("validate", [False, True])
def test_nan_log_density_is_a_rejection(explorer, validate):
    kwargs = {"rwmh": {"scale": 1.0}, "hmc": {"num_steps": 3}, "nuts": {"max_tree_depth": 3}}
    kernel = ParallelTempering(nan_region_model, num_replicas=3, max_temperature=10.0,
                               explorer=explorer, explorer_kwargs=kwargs[explorer],
                               init_strategy=init_to_value(values={"theta": torch.tensor(0.0)}))
    pyro.set_rng_seed(0)
    # With validation on, pyro.factor(NaN) raises inside the model: still just a rejection.
    mcmc = MCMC(kernel, 100, 50, disable_progbar=True, disable_validation=not validate)
    mcmc.run()
    theta = mcmc.get_samples()["theta"]
    assert torch.isfinite(theta).all() and (theta <= 1.0).all()
    assert theta.unique().numel() > 10  # it still moves
    record = mcmc.diagnostics()["tempering_record"]["chain 0"]["log_likelihood"]
    assert torch.isfinite(record).all()


def correlation_model():
    # The covariance [[1, rho], [rho, 1]] is not positive-definite for |rho| >= 1, where
    # torch.linalg.cholesky raises: a rejected point, as in Pyro's own HMC, never a crash.
    rho = pyro.sample("rho", dist.Normal(0.0, 2.0))
    one = torch.ones(())
    cov = torch.stack([torch.stack([one, rho]), torch.stack([rho, one])])
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(2), scale_tril=torch.linalg.cholesky(cov)),
                obs=torch.tensor([0.3, 0.5]))


@pytest.mark.parametrize("explorer", ["rwmh", "hmc", "nuts"])
def test_a_failed_factorization_is_a_rejection(explorer):
    kwargs = {"rwmh": {"scale": 1.0}, "hmc": {"num_steps": 3}, "nuts": {"max_tree_depth": 3}}
    kernel = ParallelTempering(correlation_model, num_replicas=3, max_temperature=10.0,
                               explorer=explorer, explorer_kwargs=kwargs[explorer],
                               init_strategy=init_to_value(values={"rho": torch.tensor(0.0)}))
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, 100, 50, disable_progbar=True)
    mcmc.run()
    rho = mcmc.get_samples()["rho"]
    assert (rho.abs() < 1.0).all()
    assert rho.unique().numel() > 10  # it still moves
    record = mcmc.diagnostics()["tempering_record"]["chain 0"]["log_likelihood"]
    assert torch.isfinite(record).all()


def test_nan_swap_ratio_is_refused():
    # The prior rung draws exactly from the prior, so it often holds states whose
    # log-likelihood is NaN; swapping with them must be refused, never accepted.
    kernel = ParallelTempering(nan_region_model, num_replicas=3, max_temperature=math.inf,
                               explorer="rwmh",
                               init_strategy=init_to_value(values={"theta": torch.tensor(0.0)}))
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, 300, 100, disable_progbar=True)
    mcmc.run()
    record = mcmc.diagnostics()["tempering_record"]["chain 0"]
    hot_nan = torch.isnan(record["log_likelihood"][:, -1])
    assert hot_nan.any()
    assert torch.isfinite(record["log_likelihood"][:, :-1]).all()
    assert (mcmc.get_samples()["theta"] <= 1.0).all()
    assert mcmc.diagnostics()["swap_acceptance"]["chain 0"][-1] > 0  # other swaps happen


def test_callable_explorer_without_clear_cache_fails_at_setup():
    from pyro_pt.explorers import RandomWalkMetropolis

    class NoCache(RandomWalkMetropolis):
        clear_cache = None

    kernel = ParallelTempering(linear_model, num_replicas=2, explorer=NoCache)
    with pytest.raises(TypeError, match="^explorer kernel NoCache has no clear_cache"):
        setup(kernel, *linear_data())


def test_agreeing_ladder_arguments_are_accepted():
    kernel = ParallelTempering(linear_model, temperatures=[1.0, 2.0, 4.0], num_replicas=3,
                               max_temperature=4.0)
    assert kernel.temperatures == [1.0, 2.0, 4.0]
    # the defaults: 8 rungs to the prior (T = inf), equally spaced in beta
    assert ParallelTempering(linear_model).betas == pytest.approx([1 - k / 7 for k in range(8)])
    assert ParallelTempering(linear_model, max_temperature=50.0).temperatures == pytest.approx(
        [50.0 ** (k / 7) for k in range(8)])


def test_explorer_given_as_a_kernel_class_is_its_factory():
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=2, max_temperature=10.0, explorer=NUTS,
                               explorer_kwargs={"max_tree_depth": 2})
    MCMC(kernel, 3, 3, disable_progbar=True).run(*linear_data())
    assert all(isinstance(e.kernel, NUTS) for e in kernel.run.rungs.explorers)
    assert [e.kernel._max_tree_depth for e in kernel.run.rungs.explorers] == [2, 2]


def test_sites_that_change_between_runs_are_named():
    calls = []

    def renaming(y):
        calls.append(1)
        mu = pyro.sample("mu" if len(calls) % 3 else "nu", dist.Normal(0.0, 1.0))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with pytest.raises(ValueError, match="sample site 'mu' was in the model's first run but is "
                       "missing from a later one"):
        setup(ParallelTempering(renaming, num_replicas=2, explorer="rwmh"), torch.tensor(0.5))


def test_nan_in_the_data_names_the_observed_site():
    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.sample("x", dist.Normal(mu, 1.0), obs=torch.tensor(0.0))
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    y = torch.tensor([0.1, math.nan, 0.3])
    with pytest.raises(ValueError, match="found NaN in the observed values of site 'y' .1 of 3"):
        setup(ParallelTempering(model, num_replicas=2, explorer="rwmh"), y)


def test_fallback_reason_in_plain_words_keeps_the_capture_message():
    def branching(y):
        z = pyro.sample("z", dist.Normal(0.0, 1.0))
        if z > 0:  # Python control flow on a latent value
            pyro.sample("y", dist.Normal(z, 1.0), obs=y)
        else:
            pyro.sample("y", dist.StudentT(3.0, z, 1.0), obs=y)

    kernel = ParallelTempering(branching, num_replicas=2, explorer="rwmh")
    setup(kernel, torch.tensor(0.7))
    info = kernel.explorer_info
    assert info["potential"] == "traced"
    assert info["potential_reason"] == (
        "the model branches on a latent value (Python control flow such as `if z > 0`), so its "
        "graph cannot be captured; every evaluation traces the model with Pyro (slower, still "
        "exact)")
    assert "make_fx" in info["potential_detail"]


def test_a_shape_bug_names_the_site_at_setup():
    def model():
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0).expand([3]))
        pyro.sample("y", dist.Normal(theta, 1.0), obs=torch.zeros(8))

    kernel = ParallelTempering(model, num_replicas=2, explorer="rwmh")
    # MCMC turns validation off, where torch's broadcast error names no site
    with pyro.validation_enabled(False), pytest.raises(
            ValueError, match=r"observed site 'y' fails: its Normal has batch_shape \(3,\) and event_shape "
            r"\(\), its value has shape \(8,\)") as caught:
        setup(kernel)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert kernel.run is None  # refused before any rung was built


def test_to_inference_data_wants_the_mcmc_that_ran():
    from pyro_pt import to_inference_data

    kernel = ParallelTempering(linear_model, num_replicas=2, explorer="rwmh")
    with pytest.raises(TypeError, match=r"takes the MCMC object that ran the kernel, not the kernel: "
                       r"mcmc = MCMC\(kernel, ...\); mcmc.run\(\*data\)"):
        to_inference_data(kernel)
    mcmc = MCMC(kernel, 5, 2, disable_progbar=True)
    with pytest.raises(ValueError, match=r"it has not run: call mcmc.run\(\*data\) first"):
        to_inference_data(mcmc)
    pyro.set_rng_seed(0)
    mcmc.run(*linear_data())
    with pytest.raises(TypeError, match="not the kernel"):
        to_inference_data(kernel)  # after the run, too
    assert to_inference_data(mcmc)["posterior"]["w"].shape == (1, 5, 2)


def test_no_draws_are_refused_before_warmup():
    """num_samples=0 is refused at set-up: no explorer has moved when the error comes."""
    kernel = ParallelTempering(linear_model, num_replicas=2)
    mcmc = MCMC(kernel, num_samples=0, warmup_steps=50, disable_progbar=True)
    with pytest.raises(ValueError, match=r"num_samples=0.*num_samples >= 1"):
        mcmc.run(*linear_data())
    assert kernel.run is None  # set-up stopped before a run state was built

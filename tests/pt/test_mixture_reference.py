"""``reference="mixture"``: q's density, gradient and draws against torch's mixture, the fit
against the components that made its draws, the compiled graph's form against the eager one,
and whole runs against exact answers (the evidence of a conjugate model, the mode weights of
a lopsided mixture by quadrature), resumed bitwise."""

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.reference import MixtureReference, check_reference
from pyro_pt.reference.graph import referenced_graph
from pyro_pt.reference.mixture import WEIGHT_FLOOR, WIDEN, fit_mixture

from .models import linear_model, sum_data, sum_log_evidence, sum_model, sum_posterior
from .multimodal import CASES, misweighed, shares
from .test_checkpoint import assert_continues, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

F64 = torch.float64


def _three():
    """Three components in 2-d, unequal weights, correlated covariances."""
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    means = torch.tensor([[-4.0, 0.0], [3.0, 3.0], [2.0, -5.0]], dtype=F64)
    trils = torch.tensor([[[1.0, 0.0], [0.5, 0.8]], [[0.6, 0.0], [-0.3, 0.4]],
                          [[0.9, 0.0], [0.0, 1.5]]], dtype=F64)
    return weights, means, trils


def _torch_mixture(weights, means, trils):
    return dist.MixtureSameFamily(dist.Categorical(weights),
                                  dist.MultivariateNormal(means, scale_tril=trils))


def test_the_density_its_gradient_and_the_draws_are_the_mixtures():
    weights, means, trils = _three()
    q = MixtureReference(weights.log(), means, trils)
    exact = _torch_mixture(weights, means, trils)
    points = torch.randn(50, 2, generator=torch.Generator().manual_seed(0), dtype=F64) * 4
    points.requires_grad_(True)
    log_p = exact.log_prob(points)
    (grad,) = torch.autograd.grad(log_p.sum(), points)
    log_q, grad_q = q.log_prob_and_grad(points.detach())
    assert torch.allclose(log_q, log_p.detach(), rtol=1e-12, atol=1e-12)
    assert torch.allclose(q.log_prob(points.detach()), log_p.detach(), rtol=1e-12, atol=1e-12)
    assert torch.allclose(grad_q, grad, rtol=1e-10, atol=1e-12)
    torch.manual_seed(0)
    draws = q.sample_block(40000, torch.zeros(2, dtype=F64))
    mean = (weights[:, None] * means).sum(0)
    second = sum(w * (t @ t.T + torch.outer(m, m)) for w, m, t in zip(weights, means, trils))
    covariance = second - torch.outer(mean, mean)
    error = (draws.mean(0) - mean) / (covariance.diagonal() / draws.shape[0]).sqrt()
    assert error.abs().max() < 4, error
    assert torch.allclose(torch.cov(draws.T), covariance, rtol=0.05, atol=0.1)
    # each component's share of the draws: nearest mean
    nearest = torch.cdist(draws, means).argmin(-1)
    found = torch.bincount(nearest, minlength=3).to(F64) / draws.shape[0]
    assert torch.allclose(found, weights, atol=0.01), found


def test_the_fit_finds_the_components_that_made_the_draws():
    weights, means, trils = _three()
    torch.manual_seed(1)
    q = MixtureReference(weights.log(), means, trils)
    draws = q.sample_block(4000, torch.zeros(2, dtype=F64))
    log_weights, fitted_means, fitted_trils = fit_mixture(draws, 8, seed=0)
    assert fitted_means.shape[0] == 3  # the information criterion's choice
    order = torch.cdist(means, fitted_means).argmin(-1)
    assert torch.allclose(fitted_means[order], means, atol=0.15)
    assert torch.allclose(log_weights.exp()[order], weights, atol=0.03)
    covariances = trils @ trils.transpose(-1, -2)
    fitted = fitted_trils @ fitted_trils.transpose(-1, -2)
    # 3 standard errors of a covariance entry of the smallest component (800 draws)
    assert torch.allclose(fitted[order], covariances, rtol=0.15, atol=0.15)
    # a reference's fit (to every 4th draw: 1000): widened, its weights mixed with the uniform
    q = MixtureReference.gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64), "test")
    assert q.fit(draws) and q.num_components == 3 and q.fits == 1
    qorder = torch.cdist(means, q.means).argmin(-1)
    floored = (1 - WEIGHT_FLOOR) * weights + WEIGHT_FLOOR / 3
    assert torch.allclose(q.log_weights.exp()[qorder], floored, atol=0.04)
    widened = q.scale_trils @ q.scale_trils.transpose(-1, -2)
    assert torch.allclose(widened[qorder], WIDEN * covariances, rtol=0.25, atol=0.4)
    assert not q.fit(draws[:5])  # too few draws keep q


@pytest.mark.parametrize("data_seed", [0, 1])
def test_the_fit_finds_six_separated_modes_from_every_seed(data_seed):
    """The three-component mixture's posterior has 6 modes (the permutations of its means);
    a fit that seeds two of them with one mean merges them, and q's leg then misses a mode's
    weight (the fit's seeds are the fit's count, so every seed is a fit a run makes)."""
    import itertools
    means = torch.tensor(list(itertools.permutations([-4.0, 0.0, 4.0])), dtype=F64)
    generator = torch.Generator().manual_seed(data_seed)
    x = torch.cat([m + 0.7 * torch.randn(150, 3, generator=generator, dtype=F64) for m in means])
    for seed in range(8):
        log_weights, found, _ = fit_mixture(x, 8, seed=seed)
        assert found.shape[0] == 6, (seed, found)
        assert torch.cdist(means, found).min(1).values.max() < 0.3, (seed, found)
        assert torch.allclose(log_weights.exp(), torch.full((6,), 1 / 6, dtype=F64), atol=0.03)
        # the previous fit's means start one more EM run: it keeps what it found
        again = fit_mixture(x, 8, seed=seed + 100, start=found)[1]
        assert torch.cdist(means, again).min(1).values.max() < 0.3


def test_the_graph_form_is_the_eager_density_with_its_unused_components():
    weights, means, trils = _three()
    q = MixtureReference(weights.log(), means, trils)
    assert q.graph_kind == ("mixture", 8)

    def model_graph(z):  # lp = -|z|^2 / 2, ll = sum(z)
        return -0.5 * (z * z).sum(), z.sum(), -z, torch.ones_like(z)

    graph = referenced_graph(model_graph, q.graph_kind)
    params = q.graph_params(F64, torch.device("cpu"))
    assert params[0].shape == (8,) and params[2].shape == (8, 2, 2)
    for z in torch.randn(10, 2, generator=torch.Generator().manual_seed(2), dtype=F64) * 3:
        log_q, ll, grad_q, grad_ll = graph(z, *params)
        eager, eager_grad = q.log_prob_and_grad(z)
        assert torch.allclose(log_q, eager, rtol=1e-12)
        assert torch.allclose(grad_q, eager_grad, rtol=1e-10, atol=1e-12)
        lp, model_ll = model_graph(z)[:2]
        assert torch.allclose(ll, lp + model_ll - eager, rtol=1e-12)
        assert torch.allclose(grad_ll, -z + 1 - eager_grad, rtol=1e-10, atol=1e-12)


def test_bad_mixtures_are_refused_by_name():
    weights, means, trils = _three()
    with pytest.raises(ValueError, match="scale_trils"):
        MixtureReference(weights.log(), means, -trils)
    with pytest.raises(ValueError, match="log_weights"):
        MixtureReference(weights.log()[:2], means, trils)
    with pytest.raises(ValueError, match="max_components"):
        MixtureReference(weights.log(), means, trils, max_components=2)
    check_reference("mixture")
    with pytest.raises(ValueError, match="'mixture'"):
        check_reference("mixtures")


def _sum_run(seed=0, warmup=200, samples=400):
    torch.set_num_threads(1)
    y = sum_data()
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(sum_model, num_replicas=6, reference="mixture", num_ladders=2)
    mcmc = MCMC(kernel, warmup_steps=warmup, num_samples=samples, disable_progbar=True)
    mcmc.run(y)
    return kernel, mcmc, y


def test_a_run_against_a_fitted_mixture_gives_the_posterior_and_the_evidence():
    kernel, mcmc, y = _sum_run()
    assert kernel.run.reference.fits >= 2
    assert "mixture of" in kernel.explorer_info["reference"]
    assert kernel.explorer_info["legs"].startswith("stabilized")
    diagnostics = kernel.diagnostics()
    # a dropped log q term, or a tempered prior, moves log Z by nats
    assert abs(diagnostics["log_Z"] - sum_log_evidence(y)) < 0.2
    assert "reference q" in diagnostics["log_Z_meaning"]
    theta = mcmc.get_samples()["theta"]
    mean, cov = sum_posterior(y)
    z = (theta.mean(0) - mean) / (cov.diagonal() / len(theta)).sqrt()
    assert z.abs().max() < 6, z  # 400 draws of two ladders, their ESS near the count
    ratio = theta.var(0) / cov.diagonal()
    assert ((ratio > 0.6) & (ratio < 1.6)).all(), ratio


@pytest.mark.slow
def test_the_mode_weights_of_a_lopsided_mixture_are_exact():
    """0.327 against 0.673 by quadrature: q's components sit on both modes, and the leg from
    q corrects q's weights to the posterior's."""
    model, args, label, exact = CASES["lopsided"]()
    torch.set_num_threads(1)
    pyro.set_rng_seed(3)
    kernel = ParallelTempering(model, reference="mixture", num_ladders=4)
    mcmc = MCMC(kernel, warmup_steps=300, num_samples=800, disable_progbar=True)
    mcmc.run(*args)
    assert kernel.run.reference.num_components >= 2
    restarts = kernel.diagnostics()["restarts"]
    assert restarts > 500, restarts  # the short leg from q restarts the cold chains often
    found = shares(label(mcmc.get_samples()), exact)
    assert misweighed(found, exact, restarts) == []


@pytest.mark.parametrize("scan", [40, 65])  # inside the round a fit ends, and after the fit
def test_a_mixture_run_resumes_bitwise(scan, tmp_path):
    torch.set_num_threads(1)
    path = str(tmp_path / f"scan{scan}.pt")
    settings = {"num_replicas": 5, "explorer": "hmc", "reference": "mixture", "num_ladders": 1}
    full = run(ParallelTempering(linear_model, **settings), 70, 10, write={scan: path})
    kernel = ParallelTempering.resume(path, linear_model)
    resumed = run(kernel, 70 - scan, 10, seed=123)
    assert_continues(full, resumed)
    assert kernel.run.reference.fits == 2  # at the ends of scans 28 and 60
    assert isinstance(kernel.run.reference, MixtureReference)

"""A fitted reference (``reference="variational"`` or a Pyro autoguide): every rung samples
``q^(1-beta) pi^beta``, log Z is the evidence, the fit is the moment match, a prior run is
unchanged, and a run resumes and spreads over processes like any other."""

import functools
import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, SVI, Trace_ELBO
from pyro.infer.autoguide import AutoMultivariateNormal, AutoNormal
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering
from pyro_pt.legs import Legs
from pyro_pt.reference import GaussianReference
from pyro_pt.reference import split as referenced

from .models import (SUM_PRIOR_SCALE, gaussian_data, gaussian_model, gaussian_tempered_ll_mean, linear_data,
                     linear_model, sum_data, sum_log_evidence, sum_model, sum_posterior)
from .test_checkpoint import assert_continues, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _sum_run(num_replicas, explorer="hmc", reference="variational", seed=0, warmup=300,
             samples=1000):
    torch.set_num_threads(1)
    y = sum_data()
    pyro.set_rng_seed(seed)
    # one ladder (a small model's default is 8): each rung's record, q's fits of one chain
    kernel = ParallelTempering(sum_model, num_replicas=num_replicas, explorer=explorer,
                               reference=reference, num_ladders=1)
    mcmc = MCMC(kernel, warmup_steps=warmup, num_samples=samples, disable_progbar=True)
    mcmc.run(y)
    return kernel, mcmc, y


def _rung_errors(kernel, mcmc, y):
    """Per rung: (mean ll' - its closed form) / its standard error, under the final q (on the
    prior's leg of a stabilized ladder, under the prior: ll' is then the model's ll)."""
    mean, cov = sum_posterior(y)
    q = kernel.run.reference
    q_cov = torch.diag(q.scale**2) if q.scale_tril is None else q.scale_tril @ q.scale_tril.T
    prior = torch.zeros(2, dtype=y.dtype), torch.eye(2, dtype=y.dtype) * SUM_PRIOR_SCALE**2
    legs = kernel.run.ladder.legs
    record = mcmc.diagnostics()["tempering_record"]["chain 0"]["log_likelihood"]
    errors = []
    for k, beta in enumerate(kernel.betas):
        column = record[:, k].to(torch.float64)
        reference = prior if legs is not None and legs.leg_of(k) == 1 else (q.mean, q_cov)
        exact = gaussian_tempered_ll_mean(mean, cov, sum_log_evidence(y), *reference, beta)
        ess = float(effective_sample_size(column.reshape(1, -1, 1)))
        errors.append(float(column.mean() - exact) / float(column.std() / math.sqrt(ess)))
    return errors


def _fixed_guide():
    """An AutoNormal on ``sum_model`` set far from its posterior: a poor, fixed reference."""
    pyro.clear_param_store()
    guide = AutoNormal(sum_model)
    guide(sum_data())
    guide.locs.theta = torch.nn.Parameter(torch.tensor([2.0, -1.0], dtype=torch.float64))
    guide.scales.theta = torch.tensor([3.0, 3.0], dtype=torch.float64)
    return guide


@functools.lru_cache(maxsize=None)
def _variational_run(num_replicas, explorer):
    # NUTS: 600 draws; from 300 the ESS behind a rung's standard error was too rough (on an
    # Intel CPU, seed 0's middle rung was 5.2 standard errors off; with 600, 1.3)
    return _sum_run(num_replicas, explorer, samples=1000 if explorer == "hmc" else 600,
                    warmup=300 if explorer == "hmc" else 200)


@pytest.mark.parametrize("num_replicas, explorer", [
    pytest.param(3, "hmc", marks=pytest.mark.slow), (4, "hmc"),  # (4, hmc) is test_log_Z's run
    pytest.param(3, "nuts", marks=pytest.mark.slow), pytest.param(3, "guide", marks=pytest.mark.slow)])
def test_every_rung_samples_its_target_and_the_cold_rung_the_posterior(num_replicas, explorer):
    if explorer == "guide":
        kernel, mcmc, y = _sum_run(num_replicas, "hmc", reference=_fixed_guide())
        assert kernel.explorer_info["reference"] == "diagonal Gaussian (AutoNormal)"
    else:
        kernel, mcmc, y = _variational_run(num_replicas, explorer)
        assert kernel.run.reference.fits >= 2 and "full-rank" in kernel.explorer_info["reference"]
    assert kernel.betas[-1] == 0.0  # the default ladder ends at q, drawn exactly
    if explorer != "nuts":  # the model's fused step, then q's terms (TorchScript: no lockstep)
        assert kernel.explorer_info["leapfrog"] == "fused"
        assert "TorchScript" in kernel.explorer_info["leapfrog_reason"]
    errors = _rung_errors(kernel, mcmc, y)
    assert max(abs(e) for e in errors) < 4.5, errors
    theta = mcmc.get_samples()["theta"]
    mean, cov = sum_posterior(y)
    ess = effective_sample_size(theta.unsqueeze(0))
    z = (theta.mean(0) - mean) / (cov.diagonal().sqrt() / ess.sqrt())
    assert z.abs().max() < 4.5, z
    ratio = theta.var(0) / cov.diagonal()  # theta_1 - theta_2 is the prior's alone
    assert ((ratio > 0.6) & (ratio < 1.6)).all(), ratio


@pytest.mark.slow
def test_a_rung_missing_the_reference_term_is_caught(monkeypatch):
    """A planted bug: the middle rung of three targets pi^beta, without q^(1-beta)."""

    def planted(potential_1, grad_1, log_q, grad_q, betas):
        betas = torch.as_tensor(betas, dtype=potential_1.dtype)
        rest = torch.where((betas > 0) & (betas < 1), 0.0, 1 - betas)
        potential = rest * -log_q + betas * potential_1
        grad = rest.unsqueeze(-1) * -grad_q + betas.unsqueeze(-1) * grad_1
        return potential, grad, -potential_1 - log_q

    monkeypatch.setattr(referenced.ReferencedSplit, "_combine", staticmethod(planted))
    kernel, mcmc, y = _sum_run(3, reference=_fixed_guide())
    errors = _rung_errors(kernel, mcmc, y)
    # the correct run's (previous test): every |error| below 4.5, chi-square below 20
    assert sum(e * e for e in errors) > 30, errors


def test_log_Z_is_the_evidence():
    kernel, mcmc, y = _variational_run(4, "hmc")
    diagnostics = kernel.diagnostics()
    assert abs(diagnostics["log_Z"] - sum_log_evidence(y)) < 0.2
    assert "log evidence" in diagnostics["log_Z_meaning"]
    assert "reference q" in diagnostics["log_Z_meaning"]


def test_the_fit_is_the_moment_match_and_its_density_is_gaussian():
    generator = torch.Generator().manual_seed(0)
    tril = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.3, 0.0], [-0.2, 0.4, 2.0]], dtype=torch.float64)
    draws = torch.randn(400, 3, generator=generator, dtype=torch.float64) @ tril.T + 1.0
    q = GaussianReference(torch.zeros(3), scale=torch.full((3,), 5.0))
    assert q.fit(draws, independent=True) and q.kind == "full-rank"
    assert torch.allclose(q.mean, draws.mean(0))
    assert torch.allclose(q.scale_tril @ q.scale_tril.T, torch.cov(draws.T), atol=1e-10)
    point = torch.tensor([[0.3, -1.0, 2.0], [1.0, 1.0, 1.0]], dtype=torch.float64,
                         requires_grad=True)
    exact = dist.MultivariateNormal(q.mean, scale_tril=q.scale_tril).log_prob(point)
    log_q, grad = q.log_prob_and_grad(point.detach())
    assert torch.allclose(log_q, exact.detach()) and torch.allclose(q.log_prob(point), exact)
    assert torch.allclose(grad, torch.autograd.grad(exact.sum(), point)[0])
    assert q.fit(draws[:12]) is False  # too few draws: q as it was


def test_a_fit_narrows_q_only_where_the_chain_crossed():
    generator = torch.Generator().manual_seed(1)
    q = GaussianReference(torch.zeros(3), scale=torch.full((3,), 5.0))
    old = torch.diag(q.scale**2)
    assert q.fit(torch.full((40, 3), 0.7, dtype=torch.float64))  # a chain that never moved
    assert torch.allclose(q.mean, torch.full((3,), 0.7, dtype=torch.float64))
    covariance = q.scale_tril @ q.scale_tril.T
    assert torch.linalg.eigvalsh(covariance - old).min() > -1e-9  # nowhere narrower
    # 120 coordinates (a diagonal fit): a slow random walk in coordinate 0, narrow, keeps its
    # old variance; the independent coordinates take their sample variance.
    steps = torch.randn(300, 120, generator=generator, dtype=torch.float64)
    chain = 0.1 * steps
    chain[:, 0] = 0.01 * steps[:, 0].cumsum(0)
    wide = GaussianReference(torch.zeros(120), scale=torch.ones(120))
    assert wide.fit(chain) and wide.kind == "diagonal"
    assert float(wide.scale[0]) == 1.0
    assert torch.allclose(wide.scale[1:] ** 2, chain[:, 1:].var(0))
    diagonal = dist.Normal(wide.mean, wide.scale).log_prob(chain[:2]).sum(-1)
    assert torch.allclose(wide.log_prob(chain[:2]), diagonal)


def test_the_fitted_reference_approaches_the_posterior():
    torch.set_num_threads(1)
    y = gaussian_data()  # posterior N(sum(y) / (n + 1), I / (n + 1)) in 10 dimensions
    n = y.shape[0]
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(gaussian_model, num_replicas=3, explorer="hmc",
                               reference="variational")
    MCMC(kernel, warmup_steps=300, num_samples=50, disable_progbar=True).run(y)
    q, sd = kernel.run.reference, 1 / math.sqrt(n + 1)
    assert q.kind == "full-rank"
    assert ((q.mean - y.sum(0) / (n + 1)).abs() / sd).max() < 0.6
    variance = torch.diagonal(q.scale_tril @ q.scale_tril.T) / sd**2
    assert ((variance > 0.5) & (variance < 1.8)).all(), variance


def two_sites(y):  # the guide's order (scale, loc) is not the sorted one (loc, scale)
    scale = pyro.sample("scale", dist.HalfNormal(2.0))
    loc = pyro.sample("loc", dist.Normal(0.0, 5.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(loc, scale), obs=y)


@pytest.mark.parametrize("guide_class", [AutoMultivariateNormal, AutoNormal])
def test_a_fitted_autoguide_is_the_reference_in_the_sorted_flat_order(guide_class):
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    y = 1.0 + 0.5 * torch.randn(30)
    guide = guide_class(two_sites)
    svi = SVI(two_sites, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(300):
        svi.step(y)
    kernel = ParallelTempering(two_sites, num_replicas=3, explorer="hmc", reference=guide)
    MCMC(kernel, warmup_steps=60, num_samples=40, disable_progbar=True).run(y)
    q = kernel.run.reference
    assert kernel.explorer_info["reference"].endswith(f"({guide_class.__name__})")
    if guide_class is AutoNormal:
        loc, scale = guide.locs, guide.scales
        expected_mean = torch.stack([loc.loc, loc.scale]).detach()
        assert torch.allclose(q.scale.float(), torch.stack([scale.loc, scale.scale]).detach())
    else:
        posterior = guide.get_posterior()
        expected_mean = posterior.mean.detach().flip(0)  # (scale, loc) -> (loc, scale)
        cov = posterior.covariance_matrix.detach().flip(0).flip(1)
        assert torch.allclose((q.scale_tril @ q.scale_tril.T).float(), cov, atol=1e-6)
    assert torch.allclose(q.mean.float(), expected_mean)
    assert q.fits == 0  # a guide is kept as given


def test_bad_references_are_refused_by_name():
    y = 1.0 + torch.randn(5)
    with pytest.raises(ValueError, match="reference must be 'auto', 'prior', 'variational'"):
        ParallelTempering(two_sites, reference="vi")
    pyro.clear_param_store()
    with pytest.raises(ValueError, match="has not been run on the model yet"):
        MCMC(ParallelTempering(two_sites, reference=AutoNormal(two_sites)),
             warmup_steps=2, num_samples=2).run(y)
    guide = AutoNormal(linear_model)
    guide(*linear_data())
    with pytest.raises(ValueError, match=r"fitted on the latent sites \['w'\]"):
        MCMC(ParallelTempering(two_sites, reference=guide), warmup_steps=2,
             num_samples=2).run(y)


def test_a_prior_run_is_unchanged_by_the_option():
    def once(**kwargs):
        pyro.set_rng_seed(3)
        kernel = ParallelTempering(linear_model, num_replicas=3, explorer="hmc", **kwargs)
        mcmc = MCMC(kernel, warmup_steps=30, num_samples=20, disable_progbar=True)
        mcmc.run(*linear_data())
        return mcmc.get_samples()["w"], kernel.explorer_info["reference"]

    (default, label), (given, _) = once(), once(reference="prior")
    assert torch.equal(default, given) and label == "prior"


@pytest.mark.parametrize("scan", [40, 65])  # inside the round a fit ends, and after the fit
@pytest.mark.parametrize("num_replicas, legs", [(3, None), (5, [3, 2])])  # one leg, or two
def test_a_variational_run_resumes_bitwise(scan, num_replicas, legs, tmp_path):
    torch.set_num_threads(1)
    path = str(tmp_path / f"scan{scan}.pt")
    settings = {"num_replicas": num_replicas, "explorer": "hmc", "reference": "variational",
                "num_ladders": 1}
    full = run(ParallelTempering(linear_model, **settings), 70, 10, write={scan: path})
    kernel = ParallelTempering.resume(path, linear_model)
    resumed = run(kernel, 70 - scan, 10, seed=123)
    assert_continues(full, resumed)
    assert kernel.run.reference.fits == 2  # at the ends of scans 28 and 60
    assert kernel.run.ladder.legs == (legs and Legs(legs))


def test_a_stuck_run_against_a_fitted_reference_says_to_compare_with_the_prior():
    kernel, _, _ = _sum_run(2, reference=_fixed_guide(), warmup=20, samples=30)
    warnings = kernel.diagnostics()["warnings"]
    assert any(w.startswith(("bottleneck", "no round trip")) for w in warnings), warnings
    assert sum("reference='prior'" in w for w in warnings) == 1, warnings
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(sum_model, num_replicas=2, max_temperature=math.inf,
                               explorer="hmc")
    MCMC(kernel, warmup_steps=20, num_samples=30, disable_progbar=True).run(sum_data())
    warnings = kernel.diagnostics()["warnings"]  # stuck too, but against the prior: no advice
    assert any(w.startswith(("bottleneck", "no round trip")) for w in warnings), warnings
    assert not any("reference='prior'" in w for w in warnings)


def test_a_reference_never_fitted_in_a_short_warmup_says_so():
    kernel, _, _ = _sum_run(3, warmup=10, samples=20)  # one round end, at scan 4: 4 draws
    assert kernel.run.reference.fits == 0
    unfitted = [w for w in kernel.diagnostics()["warnings"] if "never fitted" in w]
    assert len(unfitted) == 1 and "scans [4]" in unfitted[0] and "warm up longer" in unfitted[0]

"""The regenerative Monte Carlo error of the cold chain's means (pyro_pt.regeneration) against
exact answers on synthetic segments, the index process's regenerations, and the kernel's
``mcse`` on a run."""

import math
import warnings

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning, to_inference_data
from pyro_pt.lineages import IndexProcess
from pyro_pt.regeneration import (MIN_SEGMENTS, ColdSegments, ratio_error, regenerative_error,
                                  segment_sums)


def test_the_ratio_estimators_variance_is_the_exact_one_on_independent_blocks():
    """Blocks of fixed lengths N_s, each a constant x_s ~ N(0, 1) over its draws: the mean over
    the draws has variance sum N_s^2 / (sum N_s)^2 exactly. The squared error stated from one
    replicate averages to it over many, and the replicates' means spread by as much (an error
    divided by the draws instead of the blocks, or a missing square root, is off by ~5x)."""
    generator = torch.Generator().manual_seed(0)
    lengths = 1.0 + torch.poisson(torch.full((40,), 20.0), generator=generator)
    x = torch.randn(40, 4000, generator=generator, dtype=torch.float64)
    means, errors = ratio_error(lengths.unsqueeze(-1) * x, lengths)
    exact = float((lengths ** 2).sum() / lengths.sum() ** 2)
    assert float(errors.pow(2).mean()) == pytest.approx(exact, rel=0.05)
    assert float(means.var()) == pytest.approx(exact, rel=0.05)


def test_segment_sums_cut_at_the_starts():
    values = torch.arange(10.0, dtype=torch.float64)
    sums, lengths = segment_sums(values, [3, 7])
    assert sums.tolist() == [0 + 1 + 2, 3 + 4 + 5 + 6, 7 + 8 + 9]
    assert lengths.tolist() == [3, 4, 3]
    # the first segment begins at draw 0 whether or not it is listed; starts past the end drop
    assert segment_sums(values, [0, 3, 7, 10])[1].tolist() == [3, 4, 3]


def _sticky_chains(num_chains, num_draws, weight, mean_length, generator):
    """Chains that sit in mode 1 (probability ``weight``) or 0 for a geometric number of draws
    (mean ``mean_length``), each mode drawn afresh at every regeneration: the indicator's exact
    mean is ``weight``."""
    chains, all_starts = [], []
    for _ in range(num_chains):
        u = torch.rand(num_draws, generator=generator, dtype=torch.float64)
        lengths = (torch.log(u) / math.log(1.0 - 1.0 / mean_length)).ceil().clamp(min=1)
        edges = torch.cumsum(lengths, 0).long()
        edges = edges[edges < num_draws]
        modes = (torch.rand(len(edges) + 1, generator=generator) < weight).double()
        sizes = torch.diff(edges, prepend=torch.tensor([0]), append=torch.tensor([num_draws]))
        chains.append(torch.repeat_interleave(modes, sizes))
        all_starts.append(edges.tolist())
    return chains, all_starts


def test_the_stated_error_of_a_share_covers_it():
    """A mode's share over chains that change mode only at regenerations: the share is within
    two stated errors of the exact weight 1/2 in 90-98 % of 600 chains of 1000 draws (~34
    segments; 0.92 measured), where the independent-draws error sqrt(w (1 - w) / n) covers a
    fifth. (A lopsided weight covers less, as a binomial's Wald interval does: 0.87 at w =
    0.3, 0.83 at w = 0.3 with ~17 segments; benchmarks/README.md, "coverage.py".)"""
    generator = torch.Generator().manual_seed(1)
    chains, starts = _sticky_chains(600, 1000, 0.5, 30.0, generator)
    inside = naive = 0
    for values, cut in zip(chains, starts):
        off = abs(float(values.mean()) - 0.5)
        inside += off <= 2 * float(regenerative_error(values, cut))
        naive += off <= 2 * math.sqrt(0.25 / len(values))
    assert 0.90 <= inside / 600 <= 0.98, inside
    assert naive / 600 < 0.5, naive


def test_too_few_segments_state_no_error():
    values = torch.randn(100, dtype=torch.float64)
    starts = list(range(10, 10 * (MIN_SEGMENTS - 1), 10))  # MIN_SEGMENTS - 1 segments
    assert math.isinf(float(regenerative_error(values, starts)))
    assert math.isfinite(float(regenerative_error(values, starts + [95])))


def test_cold_segments_keep_what_the_draws_give():
    """The kept sums and moments give the error of the draws cut at the same scans and the
    draws' own mean and sd, per site and in its shape."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(200, generator=generator, dtype=torch.float64)
    b = torch.randn(200, 2, 3, generator=generator, dtype=torch.float64)
    renewed = torch.rand(200, generator=generator) < 0.1
    segments = ColdSegments()
    for n in range(200):
        segments.add({"a": a[n], "b": b[n]}, bool(renewed[n]))
    mean, sd, error = segments.summary()
    starts = [n for n in range(1, 200) if renewed[n]]
    assert segments.starts == starts
    assert torch.allclose(error["b"], regenerative_error(b, starts))
    assert torch.allclose(error["a"], regenerative_error(a, starts))
    assert torch.allclose(mean["b"], b.mean(0)) and torch.allclose(sd["b"], b.std(0))
    assert sd["a"].shape == () and error["b"].shape == (2, 3)


def test_the_index_process_renews_rung_0_when_a_lineage_from_the_exact_hot_end_takes_it():
    index = IndexProcess(3, exact_hots=[2])
    index.swap(0)  # lineage 1 (never at the hot end) takes rung 0: no regeneration
    index.observe()
    assert not index.renewed and index.restarts == 0
    index.swap(1)  # lineage 2 (it started at the hot end) moves to rung 1 ...
    index.observe()
    assert not index.renewed
    index.swap(0)  # ... and takes rung 0
    index.observe()
    assert index.renewed and index.restarts == 1
    index.observe()  # it stays: no new segment
    assert not index.renewed
    index.swap(0)  # lineage 1 returns to rung 0 without having been hot
    index.observe()
    assert not index.renewed and index.restarts == 1
    assert IndexProcess(3).restarts is None


def conjugate_model(y):
    theta = pyro.sample("theta", dist.Normal(torch.zeros(2, dtype=y.dtype), 1.0).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(theta.sum(-1, keepdim=True), 1.0), obs=y)


def _run(max_temperature, samples=200):
    y = 0.3 + torch.randn(10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(conjugate_model, explorer="rwmh", num_replicas=3,
                               max_temperature=max_temperature)
    mcmc = MCMC(kernel, samples, 60, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TemperingWarning)
        mcmc.run(y)
    return kernel, mcmc


def test_the_kernels_mcse_is_the_diagnostics_and_refuses_what_it_cannot_use():
    kernel, mcmc = _run(math.inf)
    diag, samples = kernel.diagnostics(), mcmc.get_samples()
    theta = samples["theta"]
    assert diag["mcse_segments"] == len(kernel.run.recorder.segments.starts) + 1 >= MIN_SEGMENTS
    # what diagnostics() kept during the run is what the draws MCMC recorded give
    assert torch.allclose(kernel.mcse(lambda s: s["theta"], samples), diag["mcse"]["theta"])
    assert torch.allclose(diag["posterior_sd"]["theta"], theta.double().std(0))
    assert torch.all(diag["mcse"]["theta"] > 0)
    # a function of the draws, or its values
    share = kernel.mcse(lambda s: (s["theta"][:, 0] > 0).double(), samples)
    assert share.shape == () and float(share) > 0
    assert torch.equal(kernel.mcse((theta[:, 0] > 0).double()), share)
    with pytest.raises(ValueError, match="num_draws=200"):
        kernel.mcse(theta[:10])
    with pytest.raises(ValueError, match="samples=mcmc.get_samples"):
        kernel.mcse(lambda s: s["theta"])
    # the export carries them per chain, in the site's dims
    stats = to_inference_data(mcmc, log_likelihood=False)["sample_stats"]
    assert stats["mcse_theta"].dims == ("chain", "theta_dim_0")
    assert torch.allclose(torch.as_tensor(stats["mcse_theta"].values[0]), diag["mcse"]["theta"])
    assert stats.attrs["mcse_segments"].tolist() == [diag["mcse_segments"]]
    # a finite hot end has no regenerations: no error, said so
    finite, mcmc = _run(10.0, samples=50)
    assert finite.diagnostics()["mcse"] is None
    stats = to_inference_data(mcmc, log_likelihood=False)["sample_stats"]
    assert "mcse_theta" not in stats and math.isnan(stats.attrs["mcse_segments"][0])
    with pytest.warns(TemperingWarning, match="no exact hot end"):
        assert torch.isnan(finite.mcse(lambda s: s["theta"], mcmc.get_samples())).all()

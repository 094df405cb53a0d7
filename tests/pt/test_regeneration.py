"""The regenerative Monte Carlo error of the cold chain's means (pyro_pt.regeneration) against
exact answers on synthetic tours, the index process's tours, and the kernel's ``mcse`` on a
run."""

import math
import warnings

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning, to_inference_data
from pyro_pt.lineages import IndexProcess
from pyro_pt.regeneration import MIN_TOURS, ColdTours, ratio_error, regenerative_error, tour_sums


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


def test_tour_sums_gather_each_tours_draws_wherever_they_are():
    values = torch.arange(8.0, dtype=torch.float64)
    # tour "a" holds the cold rung, is pushed up by "b", and comes back down
    sums, lengths = tour_sums(values, ["a", "a", "b", "b", "a", "c", "c", "c"])
    assert sums.tolist() == [0 + 1 + 4, 2 + 3, 5 + 6 + 7] and lengths.tolist() == [3, 2, 3]
    with pytest.raises(ValueError, match="tours names 2 draws"):
        tour_sums(values, [0, 1])


def _sticky_chains(num_chains, num_draws, weight, mean_length, generator):
    """Chains that sit in mode 1 (probability ``weight``) or 0 for a geometric number of draws
    (mean ``mean_length``), each stretch a tour with its mode drawn afresh: the indicator's
    exact mean is ``weight``. Returns the chains and each draw's tour."""
    chains, all_tours = [], []
    for _ in range(num_chains):
        u = torch.rand(num_draws, generator=generator, dtype=torch.float64)
        lengths = (torch.log(u) / math.log(1.0 - 1.0 / mean_length)).ceil().clamp(min=1)
        edges = torch.cumsum(lengths, 0).long()
        edges = edges[edges < num_draws]
        modes = (torch.rand(len(edges) + 1, generator=generator) < weight).double()
        sizes = torch.diff(edges, prepend=torch.tensor([0]), append=torch.tensor([num_draws]))
        chains.append(torch.repeat_interleave(modes, sizes))
        all_tours.append(torch.repeat_interleave(torch.arange(len(sizes)), sizes).tolist())
    return chains, all_tours


def test_the_stated_error_of_a_share_covers_it():
    """A mode's share over chains that change mode only between tours: the share is within
    two stated errors of the exact weight 1/2 in 90-98 % of 600 chains of 1000 draws (~34
    tours; 0.92 measured), where the independent-draws error sqrt(w (1 - w) / n) covers a
    fifth. (A lopsided weight covers less, as a binomial's Wald interval does: 0.87 at w =
    0.3, 0.83 at w = 0.3 with ~17 tours; benchmarks/README.md, "coverage.py".)"""
    generator = torch.Generator().manual_seed(1)
    chains, tours = _sticky_chains(600, 1000, 0.5, 30.0, generator)
    inside = naive = 0
    for values, cut in zip(chains, tours):
        off = abs(float(values.mean()) - 0.5)
        inside += off <= 2 * float(regenerative_error(values, cut))
        naive += off <= 2 * math.sqrt(0.25 / len(values))
    assert 0.90 <= inside / 600 <= 0.98, inside
    assert naive / 600 < 0.5, naive


def test_too_few_tours_state_no_error():
    values = torch.randn(100, dtype=torch.float64)
    tours = [n * (MIN_TOURS - 1) // 100 for n in range(100)]  # MIN_TOURS - 1 tours
    assert math.isinf(float(regenerative_error(values, tours)))
    assert math.isfinite(float(regenerative_error(values, tours[:-1] + [MIN_TOURS - 1])))


def test_cold_tours_keep_what_the_draws_give():
    """The kept sums and moments give the error of the draws credited to the same tours and
    the draws' own mean and sd, per site and in its shape."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(200, generator=generator, dtype=torch.float64)
    b = torch.randn(200, 2, 3, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 25, (200,), generator=generator).tolist()
    kept = ColdTours()
    for n in range(200):
        kept.add({"a": a[n], "b": b[n]}, ("lineage", labels[n]))
    mean, sd, error = kept.summary()
    assert len(kept.sums) == len(set(labels))
    assert torch.allclose(error["b"], regenerative_error(b, labels))
    assert torch.allclose(error["a"], regenerative_error(a, labels))
    assert torch.allclose(mean["b"], b.mean(0)) and torch.allclose(sd["b"], b.std(0))
    assert sd["a"].shape == () and error["b"].shape == (2, 3)


def test_the_index_process_counts_each_lineages_tours():
    """A lineage's tour changes at each visit to the exact hot end, and only there."""
    index = IndexProcess(3, exact_hots=[2])
    index.observe()
    assert index.cold_tour == (0, 0)  # lineage 0 has never been hot
    index.swap(0)  # lineage 1 takes rung 0: its first tour
    index.observe()
    assert index.cold_tour == (1, 0) and index.restarts == 0
    index.swap(1)  # lineage 2 is counted at the hot end twice, then moves down
    index.observe()
    index.swap(0)
    index.observe()
    assert index.cold_tour == (2, 2) and index.restarts == 1
    index.swap(0)  # lineage 1 returns to rung 0 without having been hot: the same tour
    index.observe()
    assert index.cold_tour == (1, 0) and index.restarts == 1
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
    assert diag["mcse_tours"] == len(set(kernel.run.recorder.tours.tours)) >= MIN_TOURS
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
    assert stats.attrs["mcse_tours"].tolist() == [diag["mcse_tours"]]
    # a finite hot end has no regenerations: no error, said so
    finite, mcmc = _run(10.0, samples=50)
    assert finite.diagnostics()["mcse"] is None
    stats = to_inference_data(mcmc, log_likelihood=False)["sample_stats"]
    assert "mcse_theta" not in stats and math.isnan(stats.attrs["mcse_tours"][0])
    with pytest.warns(TemperingWarning, match="no exact hot end"):
        assert torch.isnan(finite.mcse(lambda s: s["theta"], mcmc.get_samples())).all()

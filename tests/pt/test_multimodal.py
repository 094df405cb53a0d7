"""The default run weighs every mode right: a battery of multimodal posteriors with exact mode
weights (tests/pt/multimodal.py), each run with ``ParallelTempering(model)`` and nothing else.

Each labelling's share of the cold draws is compared with its exact weight, within 3.5
standard errors of the share that the run's tempered restarts allow, or 4 of the run's own
stated errors (``kernel.mcse``), whichever is wider
(:func:`~tests.pt.multimodal.share_bound`: at least 0.25 with the ~50 restarts a mixture run of
1000 draws makes, 0.1 from ~600). A finite hot end, or a hot end that is not drawn afresh,
keeps the population of modes the replicas started with: the planted versions below must fail
the same check. A finite hot end counts no restarts and fails outright; a prior rung stuck at
its first draw put 0.74 of the two-component mixture's draws in one labelling (exact: 0.5) with
137 restarts in 3000 draws, just inside four standard errors, so it is run for 4000 draws.
"""

import warnings

import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.explorers import PriorExplorer

from .multimodal import CASES, misweighed, shares, stated_errors

WARMUP, SAMPLES = 500, 1000


def run(case, seed=1, samples=SAMPLES, warmup=WARMUP, **kwargs):
    model, args, label, exact = CASES[case]()
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, **kwargs)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TemperingWarning)  # too few restarts: the bound widens
        mcmc.run(*args)
    restarts = kernel.diagnostics()["restarts"]
    labels = label(mcmc.get_samples())
    stated = stated_errors(kernel, labels, exact) if restarts else None
    return shares(labels, exact), exact, restarts, stated


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_default_run_weighs_every_mode(case):
    found, exact, restarts, stated = run(case)
    assert restarts is not None and restarts >= 20, restarts
    assert misweighed(found, exact, restarts, stated) == []


@pytest.mark.slow
def test_a_finite_hot_end_fails_the_battery():
    found, exact, restarts, _ = run("two_components", samples=300, warmup=200, max_temperature=50.0)
    assert restarts is None
    assert misweighed(found, exact, restarts)


@pytest.mark.slow
def test_a_hot_end_not_drawn_afresh_fails_the_battery(monkeypatch):
    """The prior rung keeps its first draw (an MCMC step that never moves): restarts are still
    counted, but they bring the cold chain nothing new."""
    first = {}

    def stuck(self, z):
        if id(self) not in first:
            first[id(self)] = original(self, z)
        z, ll = first[id(self)]
        return dict(z), ll

    original = PriorExplorer.move
    monkeypatch.setattr(PriorExplorer, "move", stuck)
    # One ladder: eight ladders' stuck prior rungs hold eight different states, whose mix can
    # happen to weigh the modes right.
    found, exact, restarts, _ = run("two_components", samples=4000, num_ladders=1)
    assert restarts > 100
    assert misweighed(found, exact, restarts)


@pytest.mark.slow
def test_a_run_whose_shares_are_in_doubt_warns_with_their_error():
    """The two-component mixture, 300 + 300: few restarts weigh its labellings. The share's
    stated error covers its distance from 1/2 at 3 errors, and the review warns, naming a
    mean's error and the draws that would shrink it."""
    model, args, label, exact = CASES["two_components"]()
    pyro.set_rng_seed(1)
    # the prior alone: the default's leg to q joins and makes restarts enough
    kernel = ParallelTempering(model, reference="prior")
    mcmc = MCMC(kernel, num_samples=300, warmup_steps=300, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(*args)
    said = [str(w.message) for w in caught if issubclass(w.category, TemperingWarning)
            and "at the end of warmup" not in str(w.message)]
    draws = mcmc.get_samples()
    first = torch.tensor([float(lab == (0, 1)) for lab in label(draws)], dtype=torch.float64)
    error = float(kernel.mcse(first))
    assert 0.0 < error < 0.5 and abs(float(first.mean()) - 0.5) <= 3 * error
    assert len(said) == 1 and "the cold chain's mean of mu[" in said[0]
    assert "draws (num_samples) would bring it to 0.1 sd" in said[0]

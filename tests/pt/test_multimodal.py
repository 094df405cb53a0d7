"""The default run weighs every mode right: a battery of multimodal posteriors with exact mode
weights (tests/pt/multimodal.py), each run with ``ParallelTempering(model)`` and nothing else.

Each labelling's share of the cold draws is compared with its exact weight, within four
standard errors of the share that the run's tempered restarts allow
(:func:`~tests.pt.multimodal.share_bound`). A finite hot end, or a hot end that is not drawn
afresh, keeps the population of modes the replicas started with: the planted versions below
must fail the same check.
"""

import warnings

import pytest

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.explorers import PriorExplorer

from .multimodal import CASES, misweighed, shares

WARMUP, SAMPLES = 500, 1000


def run(case, seed=1, **kwargs):
    model, args, label, exact = CASES[case]()
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, **kwargs)
    mcmc = MCMC(kernel, num_samples=SAMPLES, warmup_steps=WARMUP, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TemperingWarning)  # too few restarts: the bound widens
        mcmc.run(*args)
    restarts = kernel.diagnostics()["restarts"]
    return shares(label(mcmc.get_samples()), exact), exact, restarts


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_default_run_weighs_every_mode(case):
    found, exact, restarts = run(case)
    assert restarts is not None and restarts >= 20, restarts
    assert misweighed(found, exact, restarts) == []


@pytest.mark.slow
def test_a_finite_hot_end_fails_the_battery():
    found, exact, restarts = run("two_components", max_temperature=50.0)
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
    found, exact, restarts = run("two_components")
    assert restarts > 0
    assert misweighed(found, exact, restarts)

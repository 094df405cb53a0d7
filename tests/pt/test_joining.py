"""``reference="auto"`` (the default): the valley test against exact mixture densities; a
unimodal run bitwise the prior's; on separated modes a leg to q joins and the mode weights are
exact (quadrature); a run resumed before and after the join is the uninterrupted run."""

import math

import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.reference import MixtureReference
from pyro_pt.reference.joining import SEPARATION, separated

from .models import linear_data, linear_model
from .multimodal import CASES, misweighed, shares

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

F64 = torch.float64


def _pair(distance, scales=(1.0, 1.0), weights=(0.5, 0.5)):
    means = torch.tensor([[-distance / 2], [distance / 2]], dtype=F64)
    trils = torch.tensor(scales, dtype=F64).reshape(2, 1, 1)
    return MixtureReference(torch.tensor(weights, dtype=F64).log(), means, trils)


def _valley(distance):
    """The exact valley of two equal unit Gaussians ``distance`` apart: log q at a mean less
    log q at the midpoint."""
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    return math.log(0.5 * phi(0.0) + 0.5 * phi(distance)) - math.log(phi(distance / 2))


def test_two_modes_are_separated_where_the_valley_is_deeper_than_the_threshold():
    assert _valley(3.0) < SEPARATION < _valley(4.0)  # 0.44 and 1.31 nats
    assert not separated(_pair(3.0)) and separated(_pair(4.0))
    # one component, and a narrow one inside a wide one (a skewed mode's fit): no valley
    one = MixtureReference(torch.zeros(1, dtype=F64), torch.zeros(1, 1, dtype=F64),
                           torch.ones(1, 1, 1, dtype=F64))
    assert not separated(one)
    assert not separated(_pair(1.0, scales=(0.1, 1.0)))


def _linear(reference, seed=0):
    torch.set_num_threads(1)
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(linear_model, num_replicas=5, reference=reference,
                               num_ladders=2, compile="torchscript")
    mcmc = MCMC(kernel, warmup_steps=150, num_samples=60, disable_progbar=True)
    mcmc.run(*linear_data())
    return kernel, mcmc.get_samples()["w"]


def test_a_unimodal_run_is_the_priors_bitwise():
    """q is fitted at every warmup round's end, finds one mode, and touches nothing: the
    draws are reference='prior''s, bit for bit."""
    auto, draws = _linear("auto")
    prior, expected = _linear("prior")
    assert torch.equal(draws, expected)
    assert auto.run.refitting.reference.fits >= 3 and auto.run.reference is None
    assert auto.run.ladder.legs is None
    assert auto.explorer_info["reference"] == prior.explorer_info["reference"] == "prior"
    assert auto.explorer_info["joining"].startswith("none joined: q's fits to warmup's cold")
    assert prior.run.refitting is None and "joining" not in prior.explorer_info
    assert str(auto.diagnostics()["log_Z"]) == str(prior.diagnostics()["log_Z"])


def _lopsided(reference, warmup=300, samples=800, **kwargs):
    model, args, label, exact = CASES["lopsided"]()
    torch.set_num_threads(1)
    pyro.set_rng_seed(3)
    kernel = ParallelTempering(model, reference=reference, num_ladders=4, **kwargs)
    mcmc = MCMC(kernel, warmup_steps=warmup, num_samples=samples, disable_progbar=True)
    mcmc.run(*args)
    return kernel, mcmc, label, exact


def test_on_separated_modes_the_leg_to_q_joins_and_the_weights_are_exact():
    """0.327 against 0.673 by quadrature: the default run's leg to q joins at a warmup round's
    end and its restarts weigh the modes; reference='prior' keeps one leg."""
    kernel, mcmc, label, exact = _lopsided("auto")
    joined = [entry["scans"] for entry in kernel.adaptation_history if "joined" in entry]
    assert len(joined) == 1 and joined[0] <= 150, joined
    assert kernel.explorer_info["legs"].startswith("stabilized: 4 rungs from the posterior to q")
    assert "mixture of" in kernel.explorer_info["reference"]
    assert kernel.explorer_info["joining"].startswith(f"joined at scan {joined[0]}")
    assert kernel.run.reference.num_components >= 2
    restarts = kernel.diagnostics()["restarts"]
    assert restarts > 500, restarts
    assert misweighed(shares(label(mcmc.get_samples()), exact), exact, restarts) == []
    prior = _lopsided("prior", warmup=100, samples=20)[0]
    assert prior.run.ladder.legs is None and "legs" not in prior.explorer_info


def test_no_leg_joins_a_given_ladder():
    kernel = _lopsided("auto", warmup=150, samples=20, num_replicas=4, max_temperature=1e4)[0]
    assert kernel.run.ladder.legs is None and kernel.run.joining is None
    assert "the ladder was given" in kernel.explorer_info["joining"]


def _full(path_of, warmup, samples, kernel=None, seed=0):
    model, args, _, _ = CASES["lopsided"]()
    if kernel is None:
        kernel = ParallelTempering(model, num_replicas=5, num_ladders=4)

    def hook(kernel, params, stage, i):
        scan = i + 1 + (warmup if stage == "Sample" else 0)
        if scan in path_of:
            kernel.checkpoint(path_of[scan])

    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, samples, warmup, disable_progbar=True, hook_fn=hook)
    mcmc.run(*args)
    diagnostics = kernel.diagnostics()
    return kernel, mcmc.get_samples()["mu"], {
        key: str(diagnostics[key]) for key in ("swap_acceptance", "round_trips", "restarts",
                                               "adaptation_history", "log_Z")}


@pytest.mark.parametrize("scan", [40, 80])  # before q's leg joins at scan 60, and after
def test_a_run_resumed_across_the_join_is_the_uninterrupted_run(scan, tmp_path):
    torch.set_num_threads(1)
    path = str(tmp_path / f"scan{scan}.pt")
    kernel, draws, stats = _full({scan: path}, 100, 40)
    assert "joined" in kernel.adaptation_history[-1]  # at scan 60, the last round's end
    model = CASES["lopsided"]()[0]
    resumed_kernel = ParallelTempering.resume(path, model)
    _, resumed, resumed_stats = _full({}, 100 - scan, 40, resumed_kernel, seed=123)
    assert torch.equal(draws[-resumed.shape[0]:], resumed)
    assert stats == resumed_stats
    assert resumed_kernel.run.ladder.legs == kernel.run.ladder.legs

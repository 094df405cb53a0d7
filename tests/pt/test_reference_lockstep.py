"""The lockstep step against a fitted reference (:mod:`pyro_pt.reference.graph`): q's density
inside the compiled graph, its parameters read at each call.

It must agree with the unfused evaluation against q, give a slot bitwise the same numbers in
any company, follow a refit of q without compiling again, refuse a graph whose q terms are
wrong, and sample every rung's target in a whole run. Under Inductor only (slow).
"""

import pytest
import torch

import pyro
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering
from pyro_pt.explorers.hmc_dynamics import evaluate_lockstep
from pyro_pt.potential import FunctionalSplit, ModelSplit
from pyro_pt.reference import GaussianReference, ReferencedSplit
from pyro_pt.reference import graph as graph_module

from .models import sum_data, sum_model, sum_posterior
from .test_reference import _rung_errors

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]
F64, CPU = torch.float64, torch.device("cpu")
STATES = torch.tensor([[1.0, 0.4], [0.2, 1.5], [-3.0, 4.0]], dtype=F64)
BETAS = torch.tensor([1.0, 0.5, 0.0], dtype=F64)


@pytest.fixture(scope="module")
def sum_fast():
    fast = FunctionalSplit(ModelSplit(sum_model, (sum_data(),)), compile="inductor",
                           batched="loop")
    assert fast.compiled.engine == "inductor", fast.compiled.engine_reason
    return fast


def _q():
    tril = torch.tensor([[2.0, 0.0], [-1.5, 0.7]], dtype=F64)
    return GaussianReference(torch.tensor([0.5, 1.0], dtype=F64), scale_tril=tril)


def test_lockstep_against_q_agrees_with_the_unfused_step_and_follows_a_refit(sum_fast):
    q = _q()
    split = ReferencedSplit(sum_fast, q)
    plan = split.lockstep.plan(3, F64, CPU)
    assert plan is not None, split.lockstep.reason
    compiled = len(split.lockstep._steps)
    for refit in (False, True):
        if refit:  # new moments, then a diagonal q: the same graph, other inputs
            generator = torch.Generator().manual_seed(1)
            q.fit(torch.randn(50, 2, generator=generator, dtype=F64) * 3 - 1, independent=True)
            q.load({**q.state(), "scale": torch.tensor([0.3, 4.0], dtype=F64),
                    "scale_tril": None})
        potential, grad, ll, bad = evaluate_lockstep(plan, STATES, BETAS)
        expected = split.batched_potential_and_grad(STATES, BETAS)
        assert not bad.any()
        for value, ref in zip((potential, grad, ll), expected):
            torch.testing.assert_close(value, ref, rtol=1e-10, atol=1e-10)
        # a slot's numbers in any company, bitwise
        for slots in ([2, 0], [1]):
            alone = evaluate_lockstep(split.lockstep.plan(len(slots), F64, CPU), STATES[slots],
                                      BETAS[slots])
            assert all(torch.equal(a, b[slots]) for a, b in zip(alone, (potential, grad, ll)))
    assert len(split.lockstep._steps) == compiled  # a refit compiled nothing again
    # the model's own lockstep (against the prior) is another step
    ours = evaluate_lockstep(sum_fast.lockstep.plan(3, F64, CPU), STATES, BETAS)[0]
    assert not torch.allclose(ours, potential)


def test_a_graph_missing_q_gradient_is_refused(sum_fast, monkeypatch):
    real = graph_module.referenced_graph

    def planted(gm, kind):
        inner = real(gm, kind)

        def graph(z, mean, factor, log_norm):
            log_q, rest, grad_q, grad_rest = inner(z, mean, factor, log_norm)
            return log_q, rest, 0 * grad_q, grad_rest  # q's gradient dropped at beta < 1
        return graph

    monkeypatch.setattr(graph_module, "referenced_graph", planted)
    split = ReferencedSplit(sum_fast, _q())
    assert split.lockstep.plan(3, F64, CPU) is None
    assert "disagrees with single evaluations" in split.lockstep.reason


def test_a_variational_run_in_lockstep_samples_every_rung():
    torch.set_num_threads(1)
    y = sum_data()
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(sum_model, num_replicas=4, explorer="hmc", compile="inductor",
                               reference="variational")
    mcmc = MCMC(kernel, warmup_steps=300, num_samples=1000, disable_progbar=True)
    mcmc.run(y)
    assert kernel.explorer_info["leapfrog"] == "lockstep", kernel.explorer_info
    assert kernel.run.ladder.legs is not None  # both legs: against q and against the prior
    errors = _rung_errors(kernel, mcmc, y)
    assert max(abs(e) for e in errors) < 4.5, errors
    theta = mcmc.get_samples()["theta"]
    mean, cov = sum_posterior(y)
    ess = effective_sample_size(theta.unsqueeze(0))
    z = (theta.mean(0) - mean) / (cov.diagonal().sqrt() / ess.sqrt())
    assert z.abs().max() < 4.5, z
    ratio = theta.var(0) / cov.diagonal()
    assert ((ratio > 0.6) & (ratio < 1.6)).all(), ratio

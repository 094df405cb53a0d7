"""A new explorer kind is one module (its explorer and its :class:`ExplorerKind`) and one entry
in ``pyro_pt.explorers.registry.KINDS``: an independence sampler proposing from the prior,
listed here, runs with swaps, checkpoints, the report and the export, and its cold chain is the
exact posterior of the conjugate linear model. The built-in kinds report what they declare."""

import math

import pytest
import torch

from pyro_pt import ParallelTempering, to_inference_data
from pyro_pt.explorers import ExplorerKind, SingleRungExplorer, kind_of, names, registry

from .models import linear_data, linear_model, linear_posterior
from .test_checkpoint import assert_continues, resume, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class PriorProposals(SingleRungExplorer):
    r"""Independence Metropolis-Hastings with the prior as proposal: the tempered target
    :math:`p(z) e^{\beta\, ll(z)}` over the proposal :math:`p(z)` leaves an acceptance
    probability of :math:`\min(1, e^{\beta (ll(z') - ll(z))})`."""

    STATE = ("stream", "_beta", "moves", "accepted", "betas_set")  # what a checkpoint saves
    REBUILT = ("split",)  # the rung's split, which set-up gives again

    def __init__(self, rung):
        self.stream, self.split, self._beta = rung.stream, rung.split, rung.beta
        self.moves, self.accepted = 0, 0
        self.betas_set = []  # (old, new) of every set_beta: the event comes only on a change

    @property
    def beta(self):
        return self._beta

    def set_beta(self, beta):
        self.betas_set.append((self._beta, beta))
        self._beta = beta

    def start(self, z, warmup_steps):
        return z, self.split.log_likelihood(z)

    def move(self, z):
        ll = self.split.log_likelihood(z)
        with self.stream:
            proposal, proposed = self.split.sample_prior()
            accept = math.log(torch.rand(()).item()) < self._beta * (float(proposed) - ll)
        self.moves += 1
        self.accepted += accept
        return (proposal, float(proposed)) if accept else (z, ll)

    def target_changed(self):
        pass  # nothing cached

    def diagnostics(self):
        return {"divergences": [], "acceptance rate": self.accepted / max(self.moves, 1)}

    def logging(self):
        return {"acc. rate": f"{self.accepted / max(self.moves, 1):.3f}"}


INDEPENDENCE = ExplorerKind("independence", PriorProposals, gradients=False, target_option=None)


@pytest.fixture(autouse=True)
def independence(monkeypatch):
    # the one line: KINDS = [HMC, NUTS, RWMH, INDEPENDENCE] in pyro_pt/explorers/registry.py
    monkeypatch.setattr(registry, "KINDS", [*registry.KINDS, INDEPENDENCE])


KWARGS = {"num_replicas": 4, "explorer": "independence"}


def test_registered_explorer_is_a_name_the_kernel_takes():
    assert "independence" in names()
    with pytest.raises(ValueError, match=r"explorer must be one of \('hmc', 'nuts', 'rwmh', "
                                         r"'independence'\)"):
        ParallelTempering(linear_model, explorer="independent")
    with pytest.raises(ValueError, match="explorer must be one of"):
        ParallelTempering(linear_model, explorer="callable")  # a kind, not a name
    assert kind_of("independence") is INDEPENDENCE
    registry.KINDS.append(ExplorerKind("independence", PriorProposals))
    with pytest.raises(ValueError, match="two explorer kinds .* named 'independence'"):
        ParallelTempering(linear_model, explorer="independence")


@pytest.mark.slow
def test_registered_explorer_samples_the_posterior_with_swaps_report_and_export():
    torch.set_num_threads(1)
    x, y = linear_data()
    out = run(ParallelTempering(linear_model, **KWARGS), warmup=200, samples=3000,
              data=(x, y))
    mean, covariance = linear_posterior(x, y)
    w = out["w"]
    # the chain's correlation leaves about 1000 effective draws: standard errors of ~0.01
    assert torch.allclose(w.mean(0), mean, atol=0.05), (w.mean(0), mean)
    assert torch.allclose(w.T.cov(), covariance, rtol=0.15, atol=0.01)
    assert out["swap_accepted"].eq(1).any() and out["round_trips"] > 0
    assert 0.1 < out["local_acceptance"][0] < 0.9  # the explorer's own diagnostics
    assert "sampling" in out["report"]
    kernel = ParallelTempering(linear_model, **KWARGS)
    mcmc = run_mcmc(kernel, x, y)
    idata = to_inference_data(mcmc)
    assert idata.posterior["w"].shape == (1, 20, 2)
    assert kernel.explorer_info["explorer"] == "independence"
    assert kernel.explorer_info["compile"].startswith("TorchScript: explorer 'independence' "
                                                      "takes no gradients")


def test_set_beta_comes_only_when_the_rungs_beta_moves():
    torch.set_num_threads(1)
    kernel = ParallelTempering(linear_model, **KWARGS)
    run_mcmc(kernel, *linear_data(), warmup=60)
    explorers = kernel.run.rungs.explorers
    history = kernel.diagnostics()["adaptation_history"]
    assert len(history) >= 3  # the ladder adapted at several round ends
    assert explorers[0].betas_set == []  # the cold rung stays at beta = 1
    assert any(e.betas_set for e in explorers[1:-1])
    for explorer in explorers[:-1]:  # the hottest is the prior rung
        assert all(old != new for old, new in explorer.betas_set), explorer.betas_set
    # each rung's last beta is the ladder's
    assert [e.beta for e in explorers] == kernel.run.ladder.betas


def run_mcmc(kernel, x, y, warmup=20):
    from pyro.infer import MCMC
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(x, y)
    return mcmc


def test_registered_explorer_resumes_from_a_checkpoint_as_the_uninterrupted_run(tmp_path):
    torch.set_num_threads(1)
    paths = {scan: str(tmp_path / f"scan{scan}.pt") for scan in (12, 27)}
    full = run(ParallelTempering(linear_model, **KWARGS), warmup=20, samples=15, write=paths)
    for scan in paths:
        assert_continues(full, resume(paths[scan], scan, KWARGS, warmup=20, samples=15))


@pytest.mark.parametrize("name", ["hmc", "nuts", "rwmh", "independence"])
def test_each_kind_reports_the_diagnostics_it_declares(name):
    torch.set_num_threads(1)
    kind = kind_of(name)
    kwargs = {"explorer_kwargs": {"max_tree_depth": 2}} if name == "nuts" else {}
    kernel = ParallelTempering(linear_model, num_replicas=3, explorer=name, **kwargs)
    run_mcmc(kernel, *linear_data())
    contract = {"divergences", "acceptance rate"}
    tempered = [e for e in kernel.run.rungs.explorers if e.beta > 0]
    assert len(tempered) == 2
    for explorer in tempered:
        keys = set(explorer.diagnostics())
        assert contract <= keys <= contract | set(kind.reports), (name, keys)
    raised = kernel.diagnostics()["raised_target_accept_probs"]
    assert raised == [None] * 3  # nothing diverges on the linear model
    assert kernel.explorer_info["explorer"] == kind.title

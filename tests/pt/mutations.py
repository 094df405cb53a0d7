"""Known bugs planted on purpose: the tests that must catch them use these."""

import torch

from pyro_pt.potential import FunctionalSplit


def temper_the_prior_in_batched_hmc(monkeypatch):
    """Make the batched potential temper the prior too: -beta (lp + ll), not -(lp + beta ll)."""
    original = FunctionalSplit.batched_potential_and_grad

    def tempered_prior(self, z_flat, betas):
        potential, grad, ll = original(self, z_flat, torch.ones_like(betas))
        return betas * potential, betas[:, None] * grad, ll

    monkeypatch.setattr(FunctionalSplit, "batched_potential_and_grad", tempered_prior)

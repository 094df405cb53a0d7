"""Known bugs planted on purpose: the tests that must catch them use these."""

from pyro_pt.potential import batched


def temper_the_prior_in_batched_hmc(monkeypatch):
    """
    Make the batched HMC's tempered potential temper the prior too: -beta (lp + ll), not
    -(lp + beta ll). Planted in ``combine``, which both the batched potential and the fused
    leapfrog step (captured at set-up, after this) compute the potential with.
    """

    def tempered_prior(lp, ll, grad_lp, grad_ll, betas):
        return -(betas * (lp + ll)), -(betas.unsqueeze(-1) * (grad_lp + grad_ll))

    monkeypatch.setattr(batched, "combine", tempered_prior)

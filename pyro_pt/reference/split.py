r"""A model's split re-read against a reference: the explorers see ``(log q, lp + ll - log q)``.

Every rung's target is :math:`\log\pi_\beta = lp'(z) + \beta\, ll'(z)` with the split's two
parts. Against a reference :math:`q` they are

.. math:: lp'(z) = \log q(z), \qquad ll'(z) = lp(z) + ll(z) - \log q(z),

so :math:`\log\pi_\beta = (1-\beta)\log q(z) + \beta\,(lp(z) + ll(z))`: the cold rung is the
posterior whatever :math:`q`, the :math:`\beta = 0` rung is :math:`q` (drawn exactly), the swap
ratio :math:`\exp((\beta_i - \beta_j)(ll'(z_j) - ll'(z_i)))` and the stepping-stone estimate
of :math:`\log \int q\, e^{ll'} = \log p(y)` hold unchanged (Surjanovic et al. 2022). The
explorers, the swaps and the records take :class:`ReferencedSplit` where they took the split.

The model is evaluated once per point, at :math:`\beta = 1`: with :math:`U_1 = -(lp + ll)` and
its gradient from the split's fast path, :math:`U_\beta = (1-\beta)(-\log q) + \beta U_1` and
:math:`ll' = -U_1 - \log q`. The fused and lockstep leapfrog steps, which compile the
combination of :math:`lp` and :math:`ll` into one call, are not used against a reference
(``explorer_info["leapfrog"] == "batched"``).
"""

import torch

from ..potential import FlatLayout

NOT_FUSED = "the rungs target a fitted reference, whose density the fused step does not hold"


class _NoStep:
    """Stands for the fused and lockstep steps, which a reference does not use."""

    reason = NOT_FUSED

    def step(self, dtype, device):
        return None

    def plan(self, num_slots, dtype, device):
        return None


class ReferencedSplit:
    """
    ``base`` (a :class:`~pyro_pt.potential.FunctionalSplit` or
    :class:`~pyro_pt.potential.ModelSplit`) with its prior replaced by ``reference``.

    :param base: the model's split.
    :param GaussianReference reference: ``q``, shared by every rung (refitted in place).
    """

    def __init__(self, base, reference):
        self.base = base
        self.reference = reference
        self.model_split = getattr(base, "split", base)
        # the fused and lockstep steps combine lp and ll without q: not used here
        self.fused = self.lockstep = _NoStep()

    def __getattr__(self, name):  # the rest (flatten, path, compiled, device, ...) is base's
        if name in ("base", "model_split", "reference") or name.startswith("__"):
            raise AttributeError(name)  # not set yet (unpickling)
        return getattr(self.base, name)

    def _flat(self, z):
        return FlatLayout.of(z, self.model_split.latent_names).flatten(z)

    def _layout(self):
        """The latent sites' flat layout and a point in it (the model's first trace: its shapes,
        dtype and device), made once."""
        if "_like" not in self.__dict__:
            split = self.model_split
            self._like = {name: split.transforms[name](split.values[name])
                          for name in split.latent_names}
        return FlatLayout.of(self._like, self.model_split.latent_names), self._like

    def initial_point(self):
        return self.base.initial_point()

    def log_densities(self, z):
        """``(log q(z), lp + ll - log q(z))``, differentiable where ``z`` requires grad."""
        lp, ll = self.base.log_densities(z)
        log_q = self.reference.log_prob(self._flat(z))
        return log_q, lp + ll - log_q

    def log_likelihood(self, z):
        with torch.no_grad():
            return float(self.log_densities(z)[1])

    def sample_prior(self):
        """An exact draw from ``q`` (the global random stream) and its ``ll'``."""
        layout, like = self._layout()
        flat = self.reference.sample(layout.flatten(like))
        z = {name: value.clone() for name, value in layout.unflatten(flat).items()}
        with torch.no_grad():
            return z, self.log_densities(z)[1]

    @staticmethod
    def _combine(potential_1, grad_1, log_q, grad_q, betas):
        betas = torch.as_tensor(betas, dtype=potential_1.dtype, device=potential_1.device)
        rest = 1 - betas
        potential = rest * -log_q + betas * potential_1
        grad = rest.unsqueeze(-1) * -grad_q + betas.unsqueeze(-1) * grad_1
        return potential, grad, -potential_1 - log_q

    def potential_and_grad(self, z, beta):
        """``(U_beta, grad [D], ll')`` from one evaluation at beta = 1; None where the split's
        fast path leaves the point to autograd."""
        fast = getattr(self.base, "potential_and_grad", None)
        out = None if fast is None else fast(z, 1.0)
        if out is None:
            return None
        potential_1, grad_1, _ = out
        log_q, grad_q = self.reference.log_prob_and_grad(self._flat(z))
        return self._combine(potential_1, grad_1, log_q, grad_q, beta)

    def batched_potential_and_grad(self, z_flat, betas):
        """``(U_beta [R], grad [R, D], ll' [R])`` of R replicas, from one call at beta = 1."""
        ones = torch.ones_like(betas)
        potential_1, grad_1, _ = self.base.batched_potential_and_grad(z_flat, ones)
        log_q, grad_q = self.reference.log_prob_and_grad(z_flat)
        return self._combine(potential_1, grad_1, log_q, grad_q, betas)

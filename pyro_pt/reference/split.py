r"""A model's split re-read against a reference: the explorers see ``(log q, lp + ll - log q)``.

With :math:`lp' = \log q` and :math:`ll' = lp + ll - \log q`, a rung's target
:math:`lp' + \beta\, ll'` is :math:`(1-\beta)\log q + \beta\,(lp + ll)`, so the swaps, the
barrier and the stepping stones take :class:`ReferencedSplit` where they took the split
(docs/design.md, "A fitted reference"). The model is evaluated once per point, at
:math:`\beta = 1`: with :math:`U_1 = -(lp + ll)` and its gradient from the split's fast path,
:math:`U_\beta = (1-\beta)(-\log q) + \beta U_1` and :math:`ll' = -U_1 - \log q`.
"""

import torch

from ..potential import FlatLayout
from ..potential.leapfrog import agrees, check_examples
from .graph import ReferencedLockstep

class _NoLockstep:
    """Stands for the lockstep step over a split without a captured graph."""

    reason = "the model's potential is not a captured graph"

    def plan(self, num_slots, dtype, device):
        return None


class ReferencedFused:
    r"""
    A slot's leapfrog step against q (the contract of
    :func:`~pyro_pt.explorers.hmc_dynamics.leapfrog_rows`): the model's fused step at
    :math:`\beta = 1` and no kick gives the new position and :math:`(U_1, \nabla U_1)` in one
    compiled call; q's terms, their combination and the momentum update follow in torch, as
    :meth:`ReferencedSplit.batched_potential_and_grad` computes them for one row. Used where the
    model's fused step is, once it agrees bitwise with the unfused step at the graph's check
    points; otherwise :attr:`reason` says why. Lockstep against q holds q's density in its
    compiled graph instead (:mod:`~pyro_pt.reference.graph`). Measured gain
    (``benchmarks/ablation.py --workloads d``: a whole run of the 25-weight BNN against q, two
    legs of 2 rungs, Inductor, one thread, 3 interleaved rounds on machine C, lockstep off in
    both): without it the sampling phase takes 2.2-2.35x as long (28.1-32.7 s with it,
    65.9-76.9 s without).
    """

    def __init__(self, split):
        self.split = split
        self.reason = ""
        self._steps = {}  # (dtype, device, the model's step) -> the step, or None

    def __getstate__(self):
        return {**self.__dict__, "_steps": {}}

    def step(self, dtype, device):
        fused = self.split.base.fused
        base_step = fused.step(dtype, device)
        if base_step is None:
            self.reason = fused.reason
            return None
        key = (dtype, device, id(base_step))  # a recompiled graph gives a new model step
        if key not in self._steps:
            self._steps = {key: self._checked(self._compose(base_step, dtype, device),
                                              dtype, device)}
        return self._steps[key]

    def _compose(self, base_step, dtype, device):
        split = self.split
        zero, one = (torch.tensor(v, dtype=dtype, device=device) for v in (0.0, 1.0))

        def step(z, p, scaled_eps, kick, beta):
            z_new, _, potential_1, grad_1, _, ok = base_step(z, p, scaled_eps, zero, one)
            log_q, grad_q = split.reference.log_prob_and_grad(z_new[None])
            potential, grad, ll = split._combine(potential_1, grad_1, log_q[0], grad_q[0], beta)
            ok = ok & torch.isfinite(potential) & torch.isfinite(grad).all()
            return z_new, p - grad * kick, potential, grad, ll, ok

        return step

    def _checked(self, step, dtype, device):
        examples = check_examples(self.split.base.compiled.check_points(dtype, device))
        if not agrees(step, self.split.batched_potential_and_grad, examples):
            self.reason = "the leapfrog step against the reference is not bitwise the unfused one"
            return None
        return step


class ReferencePrior:
    """
    Exact draws from q for the hot end against it, as
    :class:`~pyro_pt.potential.priors.DirectPrior` gives the prior's: a block of draws in one
    call (the global random stream), each one's ll' from the model's captured graph and q's
    density. :attr:`version` is q's fit count: a block drawn before a refit is not handed out
    after it (:class:`~pyro_pt.explorers.prior.PriorExplorer`). Measured on the two-component
    mixture, ``reference="mixture"``, 8 ladders, 1000 + 1000 (one thread): the run took
    16.8 s drawing q one point at a time (each through ``sample_prior``), against 12.1 s.
    """

    path = "direct"

    def __init__(self, split):
        self.split = split

    @property
    def version(self):
        return self.split.reference.fits

    def block(self, count):
        """``count`` draws of q, flat ``[count, D]``."""
        layout, like = self.split._layout()
        return self.split.reference.sample_block(count, layout.flatten(like))

    def finish(self, row):
        """A draw of :meth:`block` as ``(z, ll')``: ``lp + ll - log q`` from the graph and q
        (the trace where the graph's is not finite)."""
        z = self.split.base.compiled.layout.unflatten(row)
        return z, self.split.graph_log_likelihood(z, row)


class ReferencedSplit:
    """The model's split ``base`` (a :class:`~pyro_pt.potential.FunctionalSplit` or
    :class:`~pyro_pt.potential.ModelSplit`) with its prior replaced by ``reference``, the
    :class:`GaussianReference` q every rung shares (refitted in place)."""

    def __init__(self, base, reference):
        self.base = base
        self.reference = reference
        self.model_split = getattr(base, "split", base)
        self.fused = ReferencedFused(self)
        self.lockstep = ReferencedLockstep(self) if hasattr(base, "batched") else _NoLockstep()
        self._prior = ReferencePrior(self)

    @property
    def prior(self):
        """The hot end's draws from q in blocks (:class:`ReferencePrior`) where the model's
        graph was captured and q draws so (``pooled_draws``: a mixture; a Gaussian's runs keep
        the random path of one draw per step their tests are seeded on), else None (each draw
        then :meth:`sample_prior`); never the model's prior draws (``FunctionalSplit.prior``)."""
        compiled = getattr(self.base, "compiled", None)
        if compiled is None or compiled.path != "functional" or not getattr(
                self.reference, "pooled_draws", False):
            return None
        return self._prior

    def __getattr__(self, name):  # the rest (flatten, path, compiled, device, ...) is base's
        if name in ("base", "model_split", "reference", "fused", "lockstep", "_prior") or \
                name.startswith("__"):
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

    def log_densities(self, z):
        """``(log q(z), lp + ll - log q(z))``, differentiable where ``z`` requires grad."""
        lp, ll = self.base.log_densities(z)
        log_q = self.reference.log_prob(self._flat(z))
        return log_q, lp + ll - log_q

    def log_likelihood(self, z):
        with torch.no_grad():
            return float(self.log_densities(z)[1])

    def graph_log_likelihood(self, z, flat=None):
        """``ll'(z) = lp + ll - log q`` as a float from the model's captured graph
        (:meth:`~pyro_pt.potential.FunctionalSplit.graph_log_densities`) and q; from
        :meth:`log_densities` (the trace's semantics) where the graph does not answer."""
        flat = self._flat(z) if flat is None else flat
        graph = getattr(self.base, "graph_log_densities", None)
        out = None if graph is None else graph(flat)
        with torch.no_grad():
            if out is None:
                return float(self.log_densities(z)[1])
            return float(out[0] + out[1] - self.reference.log_prob(flat))

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

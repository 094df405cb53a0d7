r"""The lockstep step against a fitted reference: q's density inside the compiled graph.

:func:`referenced_graph` appends q's terms (:mod:`~pyro_pt.reference.split`) to the model's
captured graph, with q's parameters as inputs rather than constants: a refit at a warmup
round's end changes the numbers the compiled step reads, not the step, so nothing is compiled
again (an Inductor compilation of a small model's step takes seconds). Only the form of q's
density is compiled in: full-rank wherever a fit may be full-rank, a diagonal q included, else
diagonal (:attr:`~pyro_pt.reference.gaussian.GaussianReference.graph_kind`).
:class:`ReferencedLockstep` is the model's :class:`~pyro_pt.potential.lockstep.Lockstep` over
that graph, checked the same way against
:meth:`~pyro_pt.reference.split.ReferencedSplit.batched_potential_and_grad`.

Measured gain, end to end (``benchmarks/ablation.py --workloads d``: a whole run of the
25-weight BNN against q, two legs of 2 rungs, W = 1000, N = 2000, Inductor, one thread,
3 interleaved rounds on machine C): without it (the fused step against q, slot by slot) the
sampling phase takes 2.99-3.55x as long (8.4-10.0 s with it, 28.1-32.7 s without).
"""

import torch

from ..potential.lockstep import Lockstep


def referenced_graph(gm, kind):
    r"""
    ``(z, *q's parameters) -> (log q, lp + ll - log q, grad log q, grad (lp + ll - log q))``
    from the model's graph ``gm`` (``z -> (lp, ll, grad lp, grad ll)``). A Gaussian's
    parameters are ``(mean, factor, log_norm)``: ``factor`` the standard deviations ``[D]``
    (``kind="diagonal"``) or :math:`L^{-1}` ``[D, D]`` (``"full-rank"``), ``log_norm``
    :math:`\log |L| + D/2 \log 2\pi`. A mixture's (``kind=("mixture", M)``,
    :mod:`~pyro_pt.reference.mixture`) are ``(log_terms [M], means [M, D], inverse factors
    [M, D, D])``.
    """
    if isinstance(kind, tuple) and kind[0] == "mixture":
        return _mixture_graph(gm)
    diagonal = kind == "diagonal"

    def graph(z, mean, factor, log_norm):
        lp, ll, grad_lp, grad_ll = gm(z)
        centred = z - mean
        if diagonal:
            u = centred / factor
            grad_q = -u / factor
        else:
            u = factor @ centred
            grad_q = -(u @ factor)  # -L^{-T} u
        log_q = -0.5 * (u * u).sum(-1) - log_norm
        return log_q, lp + ll - log_q, grad_q, grad_lp + grad_ll - grad_q

    return graph


def _mixture_graph(gm):
    """:func:`referenced_graph` of a Gaussian mixture: log q a log-sum-exp over the
    components, its gradient the components' weighted by their responsibilities."""

    def graph(z, log_terms, means, inverse):
        lp, ll, grad_lp, grad_ll = gm(z)
        u = (inverse @ (z - means).unsqueeze(-1)).squeeze(-1)  # [M, D]
        terms = log_terms - 0.5 * (u * u).sum(-1)
        log_q = torch.logsumexp(terms, -1)
        resp = (terms - log_q).exp()
        grad_q = -(resp.unsqueeze(-1) * (u.unsqueeze(-2) @ inverse).squeeze(-2)).sum(-2)
        return log_q, lp + ll - log_q, grad_q, grad_lp + grad_ll - grad_q

    return graph


class ReferencedLockstep(Lockstep):
    """The lockstep steps of a :class:`~pyro_pt.reference.split.ReferencedSplit` over a
    :class:`~pyro_pt.potential.FunctionalSplit`: the model's lockstep over
    :func:`referenced_graph`, q's current parameters appended to every call."""

    def __init__(self, split):
        super().__init__(split.base.batched)
        self.split = split

    def _key(self, dtype, device):
        # the engine too: a switch to Inductor recompiles the model's graph, and forgets the
        # model's own steps but not these
        compiled = self.evaluator.compiled
        return super()._key(dtype, device) + (compiled.engine_for(dtype, device),
                                              self.split.reference.graph_kind)

    def _graph(self, dtype, device):
        return referenced_graph(super()._graph(dtype, device), self.split.reference.graph_kind)

    def _extra(self, dtype, device):
        return list(self.split.reference.graph_params(dtype, device))

    def _evaluate(self, z, betas):
        return self.split.batched_potential_and_grad(z, betas)

"""The tempered potential of one rung, as Pyro's HMC, NUTS and the RWMH explorer call it."""

import weakref

import torch


class TemperedPotential:
    """
    Potential energy ``-(lp(z) + beta * ll(z))`` of one rung. Pyro's kernels call it and
    differentiate the result with autograd; the leapfrog steps of NUTS and HMC rungs take
    :meth:`potential_and_grad` instead (:func:`~pyro_pt.explorers.pyro_kernels.graph_gradients`).

    It remembers ``ll`` at the points it evaluates (keyed by the identity of their tensors,
    through weak references, so nothing is kept alive): the explorer returns one of those
    points, and the swaps need its ``ll`` without another trace of the model.

    A plain class rather than a closure so the kernel pickles for ``MCMC(num_chains>1)``.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("beta",)
    REBUILT = ("split", "_seen")

    def __init__(self, split, beta):
        self.split = split
        self.beta = beta
        self._seen = {}

    def __call__(self, z):
        lp, ll = self.split.log_densities(z)
        self._remember(z, ll)
        return -(lp + self.beta * ll)

    def potential_and_grad(self, z):
        """``(grads, potential)`` at ``z``, bitwise as :func:`pyro.ops.integrator.potential_grad`
        returns them, from the captured graph's own gradients, without autograd; None where only
        autograd answers (a split without a graph, a point the graph leaves to the traced path)."""
        fast = getattr(self.split, "potential_and_grad", None)
        out = None if fast is None else fast(z, self.beta)
        if out is None:
            return None
        potential, grad, ll = out
        self._remember(z, ll)
        parts = self.split.unflatten(grad)
        return {name: parts[name] for name in z}, potential

    @staticmethod
    def _key(z):
        return tuple(id(v) for v in z.values())

    def _remember(self, z, ll):
        if len(self._seen) > 4096:  # drop points whose tensors are gone
            self._seen = {k: v for k, v in self._seen.items() if all(r() is not None for r in v[0])}
        refs = tuple(weakref.ref(v) for v in z.values())
        self._seen[self._key(z)] = (refs, ll.detach() if torch.is_tensor(ll) else ll)

    def known_log_likelihood(self, z):
        """``ll(z)`` if this potential evaluated exactly these tensors, else None."""
        entry = self._seen.get(self._key(z))
        if entry is None or any(r() is not v for r, v in zip(entry[0], z.values())):
            return None
        return float(entry[1])

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_seen"] = {}  # weak references do not pickle
        return state

"""The prior rung (beta = 0): exact, independent draws from the prior."""

from .contract import SingleRungExplorer

# Prior draws made at once (on one sampler call per site), capped at about 2^20 numbers.
POOL = 64


def pool_size(dim):
    """The draws of a pool of ``dim``-dimensional states."""
    return max(1, min(POOL, (1 << 20) // max(dim, 1)))


class PriorExplorer(SingleRungExplorer):
    """Every step an exact, independent draw from the prior of ``split`` (proper priors only,
    or a reference's q), with the rung's random ``stream``. Where the split's priors are drawn
    site by site (:class:`~pyro_pt.potential.priors.DirectPrior`), or q's in blocks
    (:class:`~pyro_pt.reference.split.ReferencePrior`), they are drawn :data:`POOL` at a time
    (each sampler called once for all of them) and handed out one per step, a pool drawn before
    its source changed (a refitted q's ``version``) drawn again; else each step traces the
    model."""

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("stream", "_pool", "_next", "_version")
    REBUILT = ("split",)

    def __init__(self, stream, split):
        self.stream = stream
        self.split = split
        self._pool = None  # [P, D] draws not yet handed out from _next on (direct path)
        self._next = 0
        self._version = 0  # the draws' source's version when the pool was drawn (a refitted q)

    def start(self, z, warmup_steps):
        return self.move(None)  # a draw of its own

    def move(self, z):
        """An exact prior draw and its log-likelihood."""
        prior = getattr(self.split, "prior", None)
        if prior is None or prior.path != "direct":
            with self.stream:  # one trace of the model, whose ll comes with it
                z, ll = self.split.sample_prior()
            return z, float(ll)
        version = getattr(prior, "version", 0)
        if self._pool is None or self._next == self._pool.shape[0] or self._version != version:
            with self.stream:
                self._pool = prior.block(pool_size(self.split.dim))
            self._next, self._version = 0, version
        row = self._pool[self._next]
        self._next += 1
        return prior.finish(row)

    def target_changed(self):
        pass

    @property
    def beta(self):
        return 0.0

    def set_beta(self, beta):
        if beta != 0.0:
            raise ValueError("the prior rung stays at beta = 0")

    def diagnostics(self):
        return {"divergences": [], "acceptance rate": 1.0}

    def logging(self):
        return {}

"""The prior rung (beta = 0): exact, independent draws from the prior."""

from .contract import SingleRungExplorer


class PriorExplorer(SingleRungExplorer):
    """Every step an exact, independent draw from the prior of ``split`` (proper priors only,
    or a reference's q), with the rung's random ``stream``."""

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("stream",)
    REBUILT = ("split",)

    def __init__(self, stream, split):
        self.stream = stream
        self.split = split

    def start(self, z, warmup_steps):
        return self.move(None)  # a draw of its own

    def move(self, z):
        """An exact prior draw and its log-likelihood (known from the same model trace)."""
        with self.stream:
            z, ll = self.split.sample_prior()
        return z, float(ll)

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

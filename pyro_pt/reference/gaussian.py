r"""A Gaussian reference :math:`q = \mathcal N(m, LL^\top)` on the flat unconstrained latent
vector (:class:`~pyro_pt.potential.layout.FlatLayout`, sites in sorted name order), :math:`L`
diagonal or lower triangular: its density, exact draws and its fit. Its parameters live in
float64 and are cast to the model's dtype where a density is evaluated.

The fit is moment matching, the minimizer of :math:`KL(\pi \| q)` over Gaussians, narrowed
only in the directions the draws crossed (docs/design.md, "A fitted reference", has why and
the measurement): in the old q's whitened coordinates, an eigen-direction of the new
covariance whose projected draws have an effective sample size below
:data:`MIN_NARROWING_ESS` keeps at least the old variance (per coordinate for a diagonal fit).
The ESS of a chain confined to a corner can still look fine (124 draws of ESS 21 had a
variance of 0.48 there against 50), hence a high threshold.
"""

import math

import torch

from pyro.ops.stats import effective_sample_size

from ..checkpoint_state import check_declared

MAX_FULL_DIM = 100  # a full-rank fit costs O(D^2) per evaluation and O(D^3) per fit
FULL_DRAWS_PER_DIM = 5  # a covariance estimated from fewer draws is too noisy
MIN_FIT_DRAWS = 20  # fewer draws keep the reference as it is
MIN_NARROWING_ESS = 50  # a direction with fewer effective draws is not narrowed
MIN_VARIANCE = 1e-12  # a coordinate that never moved must not collapse q


class GaussianReference:
    """
    :math:`\\mathcal N(m, LL^\\top)` of ``mean`` ``[D]`` and either ``scale`` ``[D]`` (standard
    deviations, a diagonal :math:`L`) or ``scale_tril`` ``[D, D]`` (lower triangular, positive
    diagonal); ``origin`` says what it was built from (for ``explorer_info``).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("mean", "scale", "scale_tril", "origin", "fits")
    REBUILT = ("_cast",)  # q's tensors in the graphs' dtypes and devices

    def __init__(self, mean, scale=None, scale_tril=None, origin="given"):
        if (scale is None) == (scale_tril is None):
            raise ValueError("give exactly one of scale and scale_tril")
        self.origin = origin
        self.fits = 0
        self._set(mean, scale, scale_tril)

    def _set(self, mean, scale, scale_tril):
        self.mean = mean.detach().to(torch.float64).reshape(-1).clone()
        d = self.mean.shape[0]
        if scale is not None:
            scale = scale.detach().to(torch.float64).reshape(-1).clone()
            if scale.shape[0] != d or not bool((scale > 0).all() & torch.isfinite(scale).all()):
                raise ValueError(f"scale must be {d} positive finite numbers")
            self.scale, self.scale_tril = scale, None
        else:
            tril = scale_tril.detach().to(torch.float64).clone()
            diag = torch.diagonal(tril) if tril.shape == (d, d) else None
            if diag is None or not bool((diag > 0).all() & torch.isfinite(tril).all()):
                raise ValueError(f"scale_tril must be a {d} x {d} lower-triangular matrix with "
                                 "a positive diagonal")
            self.scale, self.scale_tril = None, torch.tril(tril)
        self._cast = {}

    @property
    def dim(self):
        return self.mean.shape[0]

    @property
    def kind(self):
        return "diagonal" if self.scale_tril is None else "full-rank"

    def describe(self):
        fitted = f", fitted {self.fits} times" if self.fits else ""
        return f"{self.kind} Gaussian ({self.origin}{fitted})"

    def _params(self, like):
        key = (like.dtype, like.device)
        if key not in self._cast:
            factor = self.scale if self.scale_tril is None else self.scale_tril
            diagonal = self.scale if self.scale_tril is None else torch.diagonal(self.scale_tril)
            log_norm = diagonal.log().sum() + 0.5 * self.dim * math.log(2 * math.pi)
            self._cast[key] = tuple(t.to(dtype=like.dtype, device=like.device)
                                    for t in (self.mean, factor, log_norm))
        return self._cast[key]

    @property
    def graph_kind(self):
        """The form of q's density in a compiled graph (:mod:`~pyro_pt.reference.graph`):
        ``"full-rank"`` wherever a fit may be full-rank (a diagonal q in that form too, so a
        refit from diagonal to full-rank compiles nothing again), else ``"diagonal"``."""
        return "full-rank" if self.dim <= MAX_FULL_DIM else "diagonal"

    def graph_params(self, dtype, device):
        """``(mean, factor, log_norm)`` as :func:`~pyro_pt.reference.graph.referenced_graph`
        takes them for :attr:`graph_kind`: the standard deviations, or :math:`L^{-1}`."""
        key = ("graph", dtype, device)
        if key not in self._cast:
            like = torch.empty((), dtype=dtype, device=device)
            mean, factor, log_norm = self._params(like)
            if self.graph_kind == "full-rank":
                tril = torch.diag(self.scale) if self.scale_tril is None else self.scale_tril
                eye = torch.eye(self.dim, dtype=torch.float64)
                factor = torch.linalg.solve_triangular(tril, eye, upper=False)
                factor = factor.to(dtype=dtype, device=device)
            self._cast[key] = (mean, factor.contiguous(), log_norm)
        return self._cast[key]

    def _whiten(self, flat):
        mean, factor, log_norm = self._params(flat)
        centred = flat - mean
        if self.scale_tril is None:
            return centred / factor, factor, log_norm
        u = torch.linalg.solve_triangular(factor, centred.unsqueeze(-1), upper=False)
        return u.squeeze(-1), factor, log_norm

    def log_prob(self, flat):
        """``log q`` at ``flat`` ``[..., D]`` (differentiable)."""
        u, _, log_norm = self._whiten(flat)
        return -0.5 * (u * u).sum(-1) - log_norm

    def log_prob_and_grad(self, flat):
        """``(log q, d log q / d flat)`` at ``flat`` ``[..., D]``, without autograd."""
        u, factor, log_norm = self._whiten(flat)
        if self.scale_tril is None:
            grad = -u / factor
        else:
            grad = -torch.linalg.solve_triangular(factor.T, u.unsqueeze(-1),
                                                  upper=True).squeeze(-1)
        return -0.5 * (u * u).sum(-1) - log_norm, grad

    def sample(self, like):
        """One exact draw ``[D]`` in ``like``'s dtype and device (the global random stream)."""
        mean, factor, _ = self._params(like)
        noise = torch.randn(self.dim, dtype=like.dtype, device=like.device)
        return mean + (factor * noise if self.scale_tril is None else factor @ noise)

    def fit(self, draws, independent=False, lineages=None):
        """
        Moment-match the draws ``[n, D]`` of a chain (``independent``: independent draws; with
        ``lineages [n]`` the ESS is summed over each lineage's own draws, :func:`_crossed`),
        narrowing q only where they crossed (see the module): full-rank with
        :data:`FULL_DRAWS_PER_DIM` draws per dimension and ``D`` at most :data:`MAX_FULL_DIM`,
        else diagonal. Returns whether q changed (not with under :data:`MIN_FIT_DRAWS` draws).
        """
        draws = draws.to(torch.float64)
        n, d = draws.shape
        if n < MIN_FIT_DRAWS:
            return False
        mean = draws.mean(0)
        centred = draws - mean
        variance = (centred * centred).sum(0) / (n - 1)
        floor = MIN_VARIANCE * max(1.0, float(variance.max()))
        if d <= MAX_FULL_DIM and n >= FULL_DRAWS_PER_DIM * d:
            old = torch.diag(self.scale) if self.scale_tril is None else self.scale_tril
            eye = torch.eye(d, dtype=torch.float64)
            white = centred @ torch.linalg.solve_triangular(old, eye, upper=False).T
            values, vectors = torch.linalg.eigh(white.T @ white / (n - 1))
            crossed = _crossed(white @ vectors, independent, lineages)
            values = torch.where(crossed, values, values.clamp_min(1.0))
            covariance = old @ (vectors * values) @ vectors.T @ old.T + floor * eye
            tril, info = torch.linalg.cholesky_ex(covariance)
            if int(info) == 0:
                self._set(mean, None, tril)
                self.fits += 1
                return True
        old = self.scale**2 if self.scale_tril is None else (self.scale_tril**2).sum(-1)
        crossed = _crossed(centred, independent, lineages)
        variance = torch.where(crossed, variance, torch.maximum(variance, old)).clamp_min(floor)
        self._set(mean, variance.sqrt(), None)
        self.fits += 1
        return True

    def state(self):
        """What a checkpoint stores: :attr:`STATE`."""
        check_declared(self)
        return {"mean": self.mean, "scale": self.scale, "scale_tril": self.scale_tril,
                "origin": self.origin, "fits": self.fits}

    def load(self, state):
        self._set(state["mean"], state["scale"], state["scale_tril"])
        self.origin, self.fits = state["origin"], state["fits"]


def _crossed(columns, independent, lineages=None):
    """
    Per column of ``columns`` ``[n, k]``, whether its effective draws reach
    :data:`MIN_NARROWING_ESS` (all of them, for that many independent draws).

    With ``lineages`` the effective sample size is the sum of each lineage's own (its draws in
    time order; a lineage with fewer than 4 counts each draw). A cold rung's draws interleave
    the lineages its swaps bring; where two cold rungs exchange their states every other scan
    (the bridge of a stabilized ladder, :mod:`pyro_pt.legs`), two stuck chains interleaved
    look like fast mixing between two points, while each lineage alone shows how little
    either moved.
    """
    n = columns.shape[0]
    if independent:
        return torch.full((columns.shape[1],), n >= MIN_NARROWING_ESS)
    if lineages is None:
        lineages = torch.zeros(n, dtype=torch.long)
    total = torch.zeros(columns.shape[1], dtype=torch.float64)
    for lineage in torch.unique(lineages):
        rows = columns[lineages == lineage]
        if rows.shape[0] < 4:
            total += rows.shape[0]
            continue
        ess = effective_sample_size(rows.unsqueeze(0))
        total += torch.nan_to_num(ess, nan=0.0).clamp(max=rows.shape[0])
    return total >= MIN_NARROWING_ESS

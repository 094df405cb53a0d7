"""The targets of vs_tempering.py: posteriors with exact mode shares and exact log evidence, in
numpy and scipy only (the peers' venv has no torch).

Every target has the prior ``x ~ Normal(0, prior_scale^2 I_dim)`` and a log-likelihood
``loglike(x)`` over ``x[..., dim]``; ``log_z`` is ``log int prior(x) exp(loglike(x)) dx``. A
target's labellings are indicator functions of the draws with exact probabilities ``shares``;
a run's share error is the largest ``|share found - exact share|`` over them (the worst
labelling's). A target is made from a JSON-able spec (:func:`target`), so the driver and the
peers' worker build the same one.

- ``mixture``: the battery's equal-weight mixture of ``k`` unit Normals with free means ``mu``
  (``benchmarks/_explorers_models.mixture``): ``loglike(mu) = sum_n logsumexp_j(N(y_n | mu_j,
  1)) - n log k``. Labellings: the ``k!`` orderings of ``mu``, each of exact share ``1/k!`` by the
  symmetry of the labels. log Z by quadrature: a product Gauss-Hermite rule on one ordering's
  mode (centred at the mode, scaled by its Laplace fit), times ``k!``; for ``k = 2`` also a full
  grid over the plane, which the driver prints beside it as a check.
- ``gaussians``: ``loglike(x) = log sum_j w_j N(x | m_j, sigma^2 I)``, ``m_j = r u_j`` with
  ``u_j`` orthonormal (a fixed random rotation). Closed form: the posterior is the mixture of
  ``N(c_j, tau^2 I)``, ``c_j = m_j s^2 / (s^2 + sigma^2)``, ``tau^2 = s^2 sigma^2 / (s^2 +
  sigma^2)``, with weights ``pi_j ~ w_j N(m_j | 0, (s^2 + sigma^2) I)`` (= ``w_j``: every
  ``|m_j| = r``), and ``Z = sum_j w_j N(m_j | 0, (s^2 + sigma^2) I)``. Labellings: in mode
  ``j``, i.e. nearest ``c_j`` and within its ball ``|x - c_j|^2 <= tau^2 chi2_dim(1 - 1e-9)``
  (a draw far from every mode, as a walker still near its prior start is, is in none). A draw
  of component ``j`` is nearer another centre with probability ``Phi(-|c_j - c_k| / (2 tau))``,
  under 1e-7 here (checked when built), so the exact share of label ``j`` is ``pi_j (1 -
  1e-9)`` to that accuracy.
- ``signs``: a product over coordinates of ``w_i N(x_i | a, sigma^2) + (1 - w_i) N(x_i | -a,
  sigma^2)``: ``2^dim`` modes. Closed form per coordinate: ``Z_i = N(a | 0, s^2 + sigma^2)``,
  and ``P(x_i > 0) = w_i Phi(c / tau) + (1 - w_i) Phi(-c / tau)`` (``c = a s^2 / (s^2 +
  sigma^2)``). Labellings: the sign of each coordinate (``dim`` of them).
"""

import itertools
import math

import numpy as np
from scipy import optimize, special, stats

LOG_2PI = math.log(2.0 * math.pi)
BALL_MISS = 1e-9  # the mass of a Gaussian mode outside the ball its label counts


def _normal_logpdf(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - math.log(scale) - 0.5 * LOG_2PI


def _logsumexp(a, axis=-1):
    """``log sum exp`` over ``axis`` without scipy's per-call overhead: the peers call the
    density once per walker."""
    top = a.max(axis, keepdims=True)
    return (top + np.log(np.exp(a - top).sum(axis, keepdims=True))).squeeze(axis)


class Target:
    """A posterior with exact labelling shares and log Z; see the module's docstring."""

    def __init__(self, spec):
        self.spec = spec
        self.name, self.kind = spec["name"], spec["kind"]
        self.prior_scale = float(spec["prior_scale"])
        if self.kind == "mixture":
            self.y = np.asarray(spec["y"], dtype=np.float64)
            self.k = int(spec["k"])
            self.dim = self.k
            self.orderings = list(itertools.permutations(range(self.k)))
            self.shares = np.full(len(self.orderings), 1.0 / len(self.orderings))
        elif self.kind == "gaussians":
            self.dim, self.sigma = int(spec["dim"]), float(spec["sigma"])
            self.weights = np.asarray(spec["weights"], dtype=np.float64)
            self._log_weights = np.log(self.weights)
            rotation = np.linalg.qr(np.random.default_rng(spec["seed"]).standard_normal(
                (self.dim, self.dim)))[0]
            self.means = float(spec["radius"]) * rotation[:, :len(self.weights)].T  # [J, dim]
            s2, v2 = self.prior_scale ** 2, self.sigma ** 2
            self.centres, self.tau = self.means * s2 / (s2 + v2), math.sqrt(s2 * v2 / (s2 + v2))
            log_w = np.log(self.weights) + _normal_logpdf(
                self.means, 0.0, math.sqrt(s2 + v2)).sum(-1)
            self.ball = self.tau ** 2 * stats.chi2.ppf(1.0 - BALL_MISS, self.dim)
            self.shares = np.exp(log_w - special.logsumexp(log_w)) * (1.0 - BALL_MISS)
            gaps = np.linalg.norm(self.centres[:, None] - self.centres[None], axis=-1)
            gaps = gaps[~np.eye(len(self.weights), dtype=bool)]
            if stats.norm.sf(gaps.min() / (2.0 * self.tau)) > 1e-7:
                raise ValueError(f"{self.name}: components overlap; raise the radius")
        elif self.kind == "signs":
            self.dim, self.sigma = int(spec["dim"]), float(spec["sigma"])
            self.offset = float(spec["offset"])
            self.weights = np.linspace(spec["weights"][0], spec["weights"][1], self.dim)
            self._log_up, self._log_down = np.log(self.weights), np.log1p(-self.weights)
            s2, v2 = self.prior_scale ** 2, self.sigma ** 2
            c, tau = self.offset * s2 / (s2 + v2), math.sqrt(s2 * v2 / (s2 + v2))
            self.shares = (self.weights * stats.norm.cdf(c / tau)
                           + (1.0 - self.weights) * stats.norm.cdf(-c / tau))
        else:
            raise ValueError(f"unknown target kind {self.kind!r}")

    # ----- the density -----

    def log_prior(self, x):
        return _normal_logpdf(np.asarray(x), 0.0, self.prior_scale).sum(-1)

    def loglike(self, x):
        """The log-likelihood at ``x[..., dim]``."""
        x = np.asarray(x, dtype=np.float64)
        if self.kind == "mixture":
            terms = _normal_logpdf(self.y[:, None], x[..., None, :], 1.0)  # [..., n, k]
            return (_logsumexp(terms) - math.log(self.k)).sum(-1)
        if self.kind == "gaussians":
            terms = _normal_logpdf(x[..., None, :], self.means, self.sigma).sum(-1)
            return _logsumexp(terms + self._log_weights)
        up = self._log_up + _normal_logpdf(x, self.offset, self.sigma)
        down = self._log_down + _normal_logpdf(x, -self.offset, self.sigma)
        return np.logaddexp(up, down).sum(-1)

    def prior_draws(self, rng, n):
        return self.prior_scale * rng.standard_normal((n, self.dim))

    # ----- exact answers -----

    def indicators(self, draws):
        """``[n, L]``: whether each draw is in each labelling (``L = len(shares)``)."""
        draws = np.asarray(draws, dtype=np.float64).reshape(-1, self.dim)
        if self.kind == "mixture":
            order = np.argsort(draws, -1)
            return np.stack([(order == np.array(p)).all(-1) for p in self.orderings], -1)
        if self.kind == "gaussians":
            squares = ((draws[:, None] - self.centres) ** 2).sum(-1)
            nearest = np.argmin(squares, -1)
            inside = squares.min(-1) <= self.ball
            return (nearest[:, None] == np.arange(len(self.weights))) & inside[:, None]
        return draws > 0.0

    def share_error(self, draws):
        """The worst labelling's ``|share - exact|``; 1.0 when there are no draws."""
        found = self.indicators(draws)
        if found.shape[0] == 0:
            return 1.0
        return float(np.abs(found.mean(0) - self.shares).max())

    def log_z(self):
        """The exact log evidence: closed form, or quadrature for the battery's mixtures."""
        if self.kind == "gaussians":
            v = self.prior_scale ** 2 + self.sigma ** 2
            terms = np.log(self.weights) + _normal_logpdf(self.means, 0.0, math.sqrt(v)).sum(-1)
            return float(special.logsumexp(terms))
        if self.kind == "signs":
            v = self.prior_scale ** 2 + self.sigma ** 2
            return float(self.dim * _normal_logpdf(self.offset, 0.0, math.sqrt(v)))
        return self.gauss_hermite_log_z()

    def log_joint(self, x):
        return self.log_prior(x) + self.loglike(x)

    def gauss_hermite_log_z(self, nodes=40):
        """log Z of a ``mixture``: ``k!`` times the integral over one ordering's mode by a product
        Gauss-Hermite rule centred at the mode and scaled by its Laplace fit; the modes are
        tens of standard deviations apart, so the rule sees one."""
        start = np.sort(np.quantile(self.y, (np.arange(self.k) + 0.5) / self.k))
        fit = optimize.minimize(lambda x: -self.log_joint(x), start, method="BFGS",
                                options={"gtol": 1e-10})
        mode, f, h = fit.x, self.log_joint, 1e-4
        # the Laplace fit's precision by central differences: it only places the nodes
        steps = np.eye(self.k) * h
        hessian = -np.array([[f(mode + a + b) - f(mode + a - b) - f(mode - a + b) + f(mode - a - b)
                              for b in steps] for a in steps]) / (4 * h * h)
        scale = np.linalg.cholesky(np.linalg.inv(hessian))  # x = mode + scale z
        z, w = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-z^2 / 2)
        grid = np.stack(np.meshgrid(*[z] * self.k, indexing="ij"), -1).reshape(-1, self.k)
        log_w = np.log(np.stack(np.meshgrid(*[w] * self.k, indexing="ij"), -1)
                       .reshape(-1, self.k)).sum(-1)
        # int f(x) dx = |scale| int f(mode + scale z) e^{z^2/2} e^{-z^2/2} dz
        values = np.concatenate([self.log_joint(mode + chunk @ scale.T)
                                 for chunk in np.array_split(grid, max(1, len(grid) // 4096))])
        log_mode = special.logsumexp(values + 0.5 * (grid ** 2).sum(-1) + log_w)
        return float(log_mode + np.log(np.abs(np.linalg.det(scale)))
                     + math.log(math.factorial(self.k)))

    def grid_log_z(self, half_width=8.0, step=0.05):
        """log Z of a two-component ``mixture`` by the midpoint rule on the whole plane
        ``[-half_width, half_width]^2`` (a check of :meth:`gauss_hermite_log_z`)."""
        if self.kind != "mixture" or self.k != 2:
            raise ValueError("grid_log_z: two-component mixtures only")
        axis = np.arange(-half_width + step / 2, half_width, step)
        rows = [special.logsumexp(self.log_joint(np.stack(np.broadcast_arrays(a, axis), -1)))
                for a in axis]
        return float(special.logsumexp(rows) + 2 * math.log(step))


def target(spec):
    """The :class:`Target` of a spec (a JSON-able dict)."""
    return Target(spec)

r"""A Gaussian-mixture reference :math:`q = \sum_j w_j \mathcal N(m_j, L_j L_j^\top)` on the
flat unconstrained latent vector, fitted to the cold chain's draws (``reference="mixture"``).

Why: a multimodal posterior's barrier from one Gaussian stays high, because a Gaussian that
covers every mode puts most of its mass between them; a mixture with a component on each mode
the cold chains found is close to the posterior, and the leg from it to the posterior is short.
On the two-component mixture of ``benchmarks/vs_tempering.py`` (exact barriers on a grid,
``benchmarks/reference_barrier.py``): from the prior :math:`\Lambda = 6.2`, from the moment-
matched Gaussian 2.2, from the mixture of the posterior's two modes 0.0001, with each
component's covariance doubled 0.35 and quadrupled 0.69. A mode the cold draws never visited
has no component; the prior's leg of the stabilized run (:mod:`~pyro_pt.reference.stabilized`)
still reaches it, so this reference is for two legs (a run of one leg warns, as for
``"variational"``).

The fit is expectation-maximization from k-means++ seeds (Dempster, Laird, Rubin 1977;
Arthur, Vassilvitskii 2007) for 1 to :data:`MAX_COMPONENTS` components, the number chosen by
the Bayesian information criterion (Schwarz 1978), each component's covariance then widened
by :data:`WIDEN` and every weight mixed with the uniform one (:data:`WEIGHT_FLOOR`), so that q's
tails cover the modes' and no component the draws underweighted starves. The seeds come from a
generator seeded by the fit's count, so every rank fits the same q from the same draws.
Parameters live in float64 and are cast where a density is evaluated; in a compiled graph q
has :data:`MAX_COMPONENTS` components always (the unused ones with weight zero), so a refit
with another number of components compiles nothing again.
"""

import math

import torch

from ..checkpoint_state import check_declared
from .gaussian import MIN_FIT_DRAWS

MAX_COMPONENTS = 8  # the most components a fit considers (and a graph holds)
MAX_MIXTURE_DIM = 20  # above, one component: an evaluation costs MAX_COMPONENTS * D^2
WIDEN = 2.0  # each fitted covariance times this
WEIGHT_FLOOR = 0.1  # the weights are (1 - WEIGHT_FLOOR) w + WEIGHT_FLOOR / J
DRAWS_PER_PARAMETER = 2  # a component with fewer draws than this per parameter is refused
EM_ITERATIONS = 100
# relative change of the log-likelihood that ends EM: 0.03 nats in 1000 draws of 3-d mixtures,
# far inside what doubling q's covariances changes; 1e-7 took 3 times as long, with the same
# components on the six-mode test of tests/pt/test_mixture_reference.py
EM_TOLERANCE = 1e-5
MAX_FIT_DRAWS = 1000  # a fit to more draws takes every k-th (a chain's draws are correlated)
# EM runs per count from greedy k-means++ seeds, the best log-likelihood kept. With plain
# k-means++ and one run, the three-component mixture's 6 modes were fitted as 3 at a round end
# (two modes per component), and that q's leg made a third of the other seeds' restarts; on 900
# draws of six separated modes, one greedy seeding found all six from 14 of 20 seeds, two from
# 20 of 20 (0.2 s a fit).
SEEDINGS = 2
MIN_VARIANCE = 1e-12
UNUSED = -1e30  # the log weight of a graph's unused component: exp gives exactly 0


def _log_terms(log_weights, trils):
    r"""``[J]``: :math:`\log w_j - \log|L_j| - D/2 \log 2\pi`, each component's density at
    its mean."""
    log_det = torch.diagonal(trils, dim1=-2, dim2=-1).log().sum(-1)
    return log_weights - log_det - 0.5 * trils.shape[-1] * math.log(2 * math.pi)


def _component_log_probs(x, log_weights, means, trils):
    r"""``[n, J]``: :math:`\log w_j + \log \mathcal N(x_i; m_j, L_j L_j^\top)`."""
    centred = (x.unsqueeze(0) - means.unsqueeze(1)).transpose(-1, -2)  # [J, D, n]
    u = torch.linalg.solve_triangular(trils, centred, upper=False)
    return (_log_terms(log_weights, trils)[:, None] - 0.5 * (u * u).sum(1)).T


def _seeds(x, count, generator):
    """Greedy k-means++: ``count`` rows of ``x`` as starting means; each next one the best,
    by the summed squared distance of every row to its nearest mean, of ``2 + log(count)``
    candidates drawn with probability proportional to their squared distance from the nearest
    one already chosen (Arthur, Vassilvitskii 2007, section 5; plain k-means++ often seeds two
    modes of six with one mean, and EM then merges them)."""
    n = x.shape[0]
    tries = 2 + int(math.log(count))
    chosen = [x[int(torch.randint(n, (1,), generator=generator))]]
    nearest = ((x - chosen[0]) ** 2).sum(-1)
    for _ in range(1, count):
        if float(nearest.sum()) <= 0.0:
            break
        picks = torch.multinomial(nearest / nearest.sum(), tries, replacement=True,
                                  generator=generator)
        after = torch.minimum(nearest, ((x[None] - x[picks][:, None]) ** 2).sum(-1))  # [t, n]
        best = int(after.sum(-1).argmin())
        chosen.append(x[picks[best]])
        nearest = after[best]
    return torch.stack(chosen)


def _em(x, count, generator, floor, means=None):
    """``(log_weights, means, trils, log_likelihood)`` of ``count`` components fitted by EM
    to ``x`` ``[n, D]`` from k-means++ seeds (or the given ``means``); None where a component
    ends with too few draws for its parameters."""
    n, d = x.shape
    means = _seeds(x, count, generator) if means is None else means.clone()
    count = means.shape[0]
    eye = torch.eye(d, dtype=x.dtype)
    centred = x - x.mean(0)
    covariance = centred.T @ centred / max(n - 1, 1) + floor * eye
    trils = torch.linalg.cholesky(covariance).expand(count, d, d).clone()
    log_weights = torch.full((count,), -math.log(count), dtype=x.dtype)
    previous = -math.inf
    needed = DRAWS_PER_PARAMETER * (d + d * (d + 1) // 2 + 1)
    for _ in range(EM_ITERATIONS):
        joint = _component_log_probs(x, log_weights, means, trils)
        total = torch.logsumexp(joint, -1)
        log_likelihood = float(total.sum())
        resp = (joint - total[:, None]).exp()
        counts = resp.sum(0)
        if count > 1 and float(counts.min()) < needed:
            return None
        log_weights = (counts / n).log()
        means = (resp.T @ x) / counts[:, None]
        centred = x.unsqueeze(0) - means.unsqueeze(1)  # [J, n, D]
        covariances = (resp.T.unsqueeze(-1) * centred).transpose(-1, -2) @ centred
        trils, info = torch.linalg.cholesky_ex(covariances / counts[:, None, None] + floor * eye)
        if bool((info != 0).any()):
            return None
        if abs(log_likelihood - previous) <= EM_TOLERANCE * abs(log_likelihood):
            break
        previous = log_likelihood
    joint = _component_log_probs(x, log_weights, means, trils)
    return log_weights, means, trils, float(torch.logsumexp(joint, -1).sum())


def fit_mixture(x, max_components, seed, start=None):
    """The mixture of 1 to ``max_components`` components with the least BIC on ``x`` ``[n,
    D]`` (float64): ``(log_weights, means, trils)``; the search stops two counts past the
    best. Each count keeps the best log-likelihood of :data:`SEEDINGS` EM runs from k-means++
    seeds (``seed`` seeds them) and, at its own count, one from ``start`` (the previous fit's
    means)."""
    n, d = x.shape
    variance = x.var(0) if n > 1 else torch.ones(d, dtype=x.dtype)
    floor = MIN_VARIANCE * max(1.0, float(variance.max()))
    generator = torch.Generator().manual_seed(seed)
    best, best_bic, worse = None, math.inf, 0
    for count in range(1, max_components + 1):
        tries = [_em(x, count, generator, floor) for _ in range(SEEDINGS if count > 1 else 1)]
        if start is not None and start.shape[0] == count > 1:
            tries.append(_em(x, count, generator, floor, start.to(x.dtype)))
        tries = [t for t in tries if t is not None and t[1].shape[0] == count]
        if not tries:
            break
        fitted = max(tries, key=lambda t: t[3])
        parameters = count - 1 + count * (d + d * (d + 1) // 2)
        bic = -2.0 * fitted[3] + parameters * math.log(n)
        if bic < best_bic:
            best, best_bic, worse = fitted[:3], bic, 0
        else:
            worse += 1
            if worse == 2:
                break
    return best


class MixtureReference:
    """
    :math:`\\sum_j w_j \\mathcal N(m_j, L_j L_j^\\top)` (see the module): ``log_weights``
    ``[J]``, ``means`` ``[J, D]``, ``scale_trils`` ``[J, D, D]`` (lower triangular, positive
    diagonal); ``max_components``: the most a fit may use (and a compiled graph holds);
    ``origin`` says what it was built from.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("log_weights", "means", "scale_trils", "max_components", "origin", "fits")
    REBUILT = ("_cast",)
    pooled_draws = True  # the hot end draws q in blocks (reference.split.ReferencePrior)

    def __init__(self, log_weights, means, scale_trils, max_components=MAX_COMPONENTS,
                 origin="given"):
        self.max_components = max_components
        self.origin = origin
        self.fits = 0
        self._set(log_weights, means, scale_trils)

    @classmethod
    def gaussian(cls, mean, scale_tril, origin):
        r"""One component, :math:`\mathcal N(` ``mean``, ``scale_tril scale_tril^T``
        :math:`)`; up to :data:`MAX_COMPONENTS` after a fit where D is at most
        :data:`MAX_MIXTURE_DIM`."""
        mean = mean.detach().to(torch.float64).reshape(1, -1)
        most = MAX_COMPONENTS if mean.shape[1] <= MAX_MIXTURE_DIM else 1
        return cls(torch.zeros(1, dtype=torch.float64), mean, scale_tril[None], most, origin)

    def _set(self, log_weights, means, scale_trils):
        means = means.detach().to(torch.float64).clone()
        trils = torch.tril(scale_trils.detach().to(torch.float64))
        log_weights = log_weights.detach().to(torch.float64).clone()
        j, d = means.shape
        diag = torch.diagonal(trils, dim1=-2, dim2=-1)
        if trils.shape != (j, d, d) or log_weights.shape != (j,) or not bool(
                (diag > 0).all() & torch.isfinite(trils).all() & torch.isfinite(means).all()):
            raise ValueError(f"a mixture of {j} components in {d} dimensions needs log_weights "
                             f"[{j}], means [{j}, {d}] and scale_trils [{j}, {d}, {d}] (lower "
                             "triangular, positive diagonal), all finite")
        if j > self.max_components:
            raise ValueError(f"{j} components, more than max_components={self.max_components}")
        self.log_weights = log_weights - torch.logsumexp(log_weights, 0)
        self.means, self.scale_trils = means, trils
        self._cast = {}

    @property
    def dim(self):
        return self.means.shape[1]

    @property
    def num_components(self):
        return self.means.shape[0]

    def describe(self):
        fitted = f", fitted {self.fits} times" if self.fits else ""
        return (f"mixture of {self.num_components} full-rank Gaussians ({self.origin}"
                f"{fitted})")

    @property
    def graph_kind(self):
        """The form of q's density in a compiled graph (:mod:`~pyro_pt.reference.graph`):
        ``("mixture", max_components)``."""
        return ("mixture", self.max_components)

    def graph_params(self, dtype, device):
        """``(log_terms [M], means [M, D], inverse factors [M, D, D])`` of
        :func:`~pyro_pt.reference.graph.referenced_graph`'s mixture form, M =
        ``max_components``: :math:`\\log w_j - \\log|L_j| - D/2 \\log 2\\pi` and
        :math:`L_j^{-1}`, the unused components at weight zero."""
        key = ("graph", dtype, device)
        if key not in self._cast:
            m, (j, d) = self.max_components, self.means.shape
            eye = torch.eye(d, dtype=torch.float64)
            log_terms = torch.full((m,), UNUSED, dtype=torch.float64)
            log_terms[:j] = _log_terms(self.log_weights, self.scale_trils)
            means = torch.zeros(m, d, dtype=torch.float64)
            means[:j] = self.means
            inverse = eye.expand(m, d, d).clone()
            inverse[:j] = torch.linalg.solve_triangular(self.scale_trils, eye.expand(j, d, d),
                                                        upper=False)
            self._cast[key] = tuple(t.to(dtype=dtype, device=device).contiguous()
                                    for t in (log_terms, means, inverse))
        return self._cast[key]

    def _params(self, like):
        key = (like.dtype, like.device)
        if key not in self._cast:
            self._cast[key] = tuple(t.to(dtype=like.dtype, device=like.device) for t in (
                _log_terms(self.log_weights, self.scale_trils), self.means, self.scale_trils))
        return self._cast[key]

    def _whiten(self, flat):
        """``(u [..., J, D], log_terms [J])``: each component's whitened point."""
        log_terms, means, trils = self._params(flat)
        centred = flat.unsqueeze(-2) - means
        u = torch.linalg.solve_triangular(trils, centred.unsqueeze(-1), upper=False)
        return u.squeeze(-1), log_terms

    def log_prob(self, flat):
        """``log q`` at ``flat`` ``[..., D]`` (differentiable)."""
        u, log_terms = self._whiten(flat)
        return torch.logsumexp(log_terms - 0.5 * (u * u).sum(-1), -1)

    def log_prob_and_grad(self, flat):
        """``(log q, d log q / d flat)`` at ``flat`` ``[..., D]``, without autograd: the
        components' gradients weighted by their responsibilities."""
        u, log_terms = self._whiten(flat)
        terms = log_terms - 0.5 * (u * u).sum(-1)
        log_q = torch.logsumexp(terms, -1)
        resp = (terms - log_q.unsqueeze(-1)).exp()
        trils = self._params(flat)[2]
        grads = -torch.linalg.solve_triangular(trils.transpose(-1, -2), u.unsqueeze(-1),
                                               upper=True).squeeze(-1)
        return log_q, (resp.unsqueeze(-1) * grads).sum(-2)

    def sample(self, like):
        """One exact draw ``[D]`` in ``like``'s dtype and device (the global random stream)."""
        return self.sample_block(1, like)[0]

    def sample_block(self, count, like):
        """``count`` exact draws ``[count, D]`` (the global random stream): each a component
        by its weight, then that component's Gaussian."""
        _, means, trils = self._params(like)
        uniforms = torch.rand(count, dtype=torch.float64)
        j = torch.searchsorted(self.log_weights.exp().cumsum(0), uniforms)
        j = j.clamp(max=self.num_components - 1).to(like.device)
        noise = torch.randn(count, self.dim, dtype=like.dtype, device=like.device)
        return means[j] + (trils[j] @ noise.unsqueeze(-1)).squeeze(-1)

    def fit(self, draws, independent=False, lineages=None):
        """
        Fit to the cold draws ``[n, D]`` (see the module); ``independent`` and ``lineages``
        are :meth:`~pyro_pt.reference.gaussian.GaussianReference.fit`'s and unused: a mixture
        is not narrowed direction by direction, the prior's leg keeps what it missed. Returns
        whether q changed (not with fewer than ``MIN_FIT_DRAWS`` draws).
        """
        draws = draws.to(torch.float64)
        if draws.shape[0] < MIN_FIT_DRAWS:
            return False
        draws = draws[::-(-draws.shape[0] // MAX_FIT_DRAWS)]
        fitted = fit_mixture(draws, self.max_components, seed=self.fits,
                             start=self.means if self.fits else None)
        if fitted is None:
            return False
        log_weights, means, trils = fitted
        weights = (1 - WEIGHT_FLOOR) * log_weights.exp() + WEIGHT_FLOOR / means.shape[0]
        self._set(weights.log(), means, trils * math.sqrt(WIDEN))
        self.fits += 1
        return True

    def state(self):
        """What a checkpoint stores: :attr:`STATE`."""
        check_declared(self)
        return {name: getattr(self, name) for name in self.STATE}

    def load(self, state):
        self.max_components = state["max_components"]
        self._set(state["log_weights"], state["means"], state["scale_trils"])
        self.origin, self.fits = state["origin"], state["fits"]

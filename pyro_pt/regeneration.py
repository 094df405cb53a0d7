r"""
The Monte Carlo error of what the cold chain reports, from its regenerations (docs/layout.md,
"Diagnostics").

With an exact hot end (beta = 0: the prior, or a fitted q, drawn afresh every scan) a lineage
that has sat there and then takes the cold rung brings a state that owes nothing to the cold
chain's past: which mode it lands in is decided by an independent draw carried down the
ladder. The cold chain's draws, cut at the scans where such a lineage takes rung 0, are
*regeneration segments*: (nearly) independent blocks of random length. A mean over all the
draws is then a ratio estimator over the segments,

.. math:: \hat\mu = \frac{\sum_s Y_s}{\sum_s N_s}, \qquad
          Y_s = \sum_{n \in s} f(x_n),\; N_s = |s|,

whose variance the delta method gives from the segments alone [1, 2]:

.. math:: \widehat{\mathrm{Var}}(\hat\mu) = \frac{S}{S - 1}
          \frac{\sum_s (Y_s - \hat\mu N_s)^2}{(\sum_s N_s)^2}.

Unlike an effective sample size, this sees the modes the cold chain cannot cross between on
its own: a mode's share of the draws varies only as often as a segment begins. The first
segment (from the end of warmup) and the last (cut off by the end of the run) are kept as
blocks too: the mean they are errors of is the mean over every draw, as
:meth:`~pyro.infer.MCMC.get_samples` gives it. The segments are independent only nearly (the
lineage that left the cold rung may come back before a fresh one arrives); the coverage of the
stated errors is measured by ``benchmarks/coverage.py``. With fewer than :data:`MIN_SEGMENTS`
segments the spread of the segments says too little and the error is ``inf``; without an
exact hot end there are no regenerations and no error is given (None).

**References**

[1] Mykland, Tierney, Yu (1995), "Regeneration in Markov chain samplers", JASA 90.

[2] Hobert, Jones, Presnell, Rosenthal (2002), "On the applicability of regenerative
simulation in Markov chain Monte Carlo", Biometrika 89.
"""

import math

import torch

# Fewer segments than this state no error (inf): the segments' spread is then itself known
# to worse than +-25 %, and a ratio estimate's delta method needs many blocks.
MIN_SEGMENTS = 10


def ratio_error(sums, lengths):
    r"""
    ``(mean, error)`` of the ratio estimator :math:`\sum_s Y_s / \sum_s N_s` over segments:
    ``sums`` ``[S, ...]`` the per-segment sums :math:`Y_s`, ``lengths`` ``[S]`` their draws
    :math:`N_s`; the error is the delta method's (see the module), ``inf`` with fewer than
    :data:`MIN_SEGMENTS` segments.
    """
    sums = torch.as_tensor(sums, dtype=torch.float64)
    lengths = torch.as_tensor(lengths, dtype=torch.float64).reshape(
        (-1,) + (1,) * (sums.dim() - 1))
    num, total = lengths.shape[0], float(lengths.sum())
    mean = sums.sum(0) / total if total else torch.full(sums.shape[1:], math.nan,
                                                        dtype=torch.float64)
    if num < MIN_SEGMENTS:
        return mean, torch.full_like(mean, math.inf)
    residuals = sums - mean * lengths
    return mean, (residuals.pow(2).sum(0) * num / (num - 1)).sqrt() / total


def segment_sums(values, starts):
    """``(sums, lengths)`` of per-draw ``values`` ``[num_draws, ...]`` cut into segments at the
    draw indices ``starts`` (each the first draw of a segment; the first segment begins at
    draw 0 whether or not 0 is among them)."""
    values = torch.as_tensor(values, dtype=torch.float64)
    num = values.shape[0]
    edges = sorted({0, *(int(s) for s in starts if 0 < s < num)}) + [num]
    sums = torch.stack([values[a:b].sum(0) for a, b in zip(edges, edges[1:])])
    return sums, torch.tensor([b - a for a, b in zip(edges, edges[1:])], dtype=torch.float64)


def regenerative_error(values, starts):
    """The Monte Carlo error of the mean over the draws of ``values`` ``[num_draws, ...]``
    whose regeneration segments begin at the draw indices ``starts``; see the module."""
    return ratio_error(*segment_sums(values, starts))[1]


class ColdSegments:
    """
    The cold chain's draws of the sampling phase, kept as regeneration segments: per segment
    the sum of every latent coordinate (float64), and all the draws' mean and variance
    (:class:`pyro.ops.welford.WelfordCovariance`). :meth:`add` takes each draw, constrained
    as :meth:`~pyro.infer.MCMC.get_samples` gives it.
    """

    def __init__(self):
        self.starts = []  # draw indices at which a segment begins (after the first)
        self.sums = []
        self.lengths = []
        self.num_draws = 0
        self.shapes = None
        self._moments = None

    def add(self, values, renewed):
        """One draw ``values`` ``{site: tensor}``; ``renewed``: a lineage fresh from an exact
        hot end has just taken the cold rung (a segment begins here)."""
        from pyro.ops.welford import WelfordCovariance

        if self.shapes is None:
            self.shapes = {name: tuple(v.shape) for name, v in values.items()}
            self._moments = WelfordCovariance(diagonal=True)
        flat = torch.cat([values[name].detach().reshape(-1).to(torch.float64).cpu()
                          for name in self.shapes]) if self.shapes else torch.zeros(0)
        if renewed and self.num_draws > 0:
            self.starts.append(self.num_draws)
        if not self.sums or renewed:
            self.sums.append(torch.zeros_like(flat))
            self.lengths.append(0)
        self.sums[-1] += flat
        self.lengths[-1] += 1
        self.num_draws += 1
        self._moments.update(flat)

    def _per_site(self, flat):
        out, at = {}, 0
        for name, shape in self.shapes.items():
            size = math.prod(shape)
            out[name] = flat[at:at + size].reshape(shape)
            at += size
        return out

    def summary(self):
        """``(mean, sd, error)``, each ``{site: tensor}`` (None before any draw): the draws'
        mean and standard deviation and the mean's regenerative Monte Carlo error."""
        if not self.num_draws:
            return None, None, None
        mean, error = ratio_error(torch.stack(self.sums), self.lengths)
        sd = (self._moments.get_covariance(regularize=False).clamp(min=0.0).sqrt()
              if self.num_draws > 1 else torch.full_like(mean, math.nan))
        return self._per_site(mean), self._per_site(sd), self._per_site(error)

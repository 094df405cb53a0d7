r"""
The Monte Carlo error of what the cold chain reports, from its regenerations (docs/layout.md,
"Diagnostics").

With an exact hot end (beta = 0: the prior, or a fitted q, drawn afresh every scan) a lineage
starts from a fresh, independent state each time it sits there. Its *tour*, from one visit to
the hot end to the next, owes nothing to the past but through the swaps it is offered: which
mode it carries down, and which of its states reach the cold rung, are its own. The cold
chain's draws, each credited to the tour of the lineage holding rung 0, are then sums over
(nearly) independent tours of random length (most of them 0: tours that never reach the cold
rung), and a mean over all the draws is a ratio estimator over the tours,

.. math:: \hat\mu = \frac{\sum_t Y_t}{\sum_t N_t}, \qquad
          Y_t = \sum_{n \in t} f(x_n),\; N_t = |t|,

whose variance the delta method gives from the tours alone [1, 2]:

.. math:: \widehat{\mathrm{Var}}(\hat\mu) = \frac{S}{S - 1}
          \frac{\sum_t (Y_t - \hat\mu N_t)^2}{(\sum_t N_t)^2},

S the tours with cold draws (those without add nothing to the sum). Unlike an effective
sample size, this sees the modes the cold chain cannot cross between on its own: a mode's
share of the draws varies only as often as a tour brings a new state down. Crediting draws to
tours, not to the stretches between arrivals of fresh lineages, matters: a lineage pushed up by
a fresh one often comes back down on the same tour, in the same mode (on a two-component
mixture the stretches' errors covered the exact share at 2 errors in about 60 % of runs). The
tours under way at the end of warmup (and each lineage's first, before any visit to the hot
end) are units too; so is the last, cut off by the end of the run: the mean they are errors of
is the mean over every draw, as :meth:`~pyro.infer.MCMC.get_samples` gives it. Tours are
independent only nearly (the swaps a tour is offered depend on the others' states); the
coverage of the stated errors is measured by ``benchmarks/coverage.py``. With fewer than
:data:`MIN_TOURS` tours the spread of the tours says too little and the error is ``inf``;
without an exact hot end there are no tours and no error is given (None).

**References**

[1] Mykland, Tierney, Yu (1995), "Regeneration in Markov chain samplers", JASA 90.

[2] Hobert, Jones, Presnell, Rosenthal (2002), "On the applicability of regenerative
simulation in Markov chain Monte Carlo", Biometrika 89.

[3] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
a scalable highly parallel MCMC scheme", JRSS B (tours; their i.i.d. structure with an exact
reference).
"""

import math

import torch

# Fewer tours than this state no error (inf): the tours' spread is then itself known to worse
# than +-25 %, and a ratio estimate's delta method needs many units.
MIN_TOURS = 10


def ratio_error(sums, lengths):
    r"""
    ``(mean, error)`` of the ratio estimator :math:`\sum_t Y_t / \sum_t N_t` over units:
    ``sums`` ``[S, ...]`` the per-unit sums :math:`Y_t`, ``lengths`` ``[S]`` their draws
    :math:`N_t`; the error is the delta method's (see the module), ``inf`` with fewer than
    :data:`MIN_TOURS` units.
    """
    sums = torch.as_tensor(sums, dtype=torch.float64)
    lengths = torch.as_tensor(lengths, dtype=torch.float64).reshape(
        (-1,) + (1,) * (sums.dim() - 1))
    num, total = lengths.shape[0], float(lengths.sum())
    mean = sums.sum(0) / total if total else torch.full(sums.shape[1:], math.nan,
                                                        dtype=torch.float64)
    if num < MIN_TOURS:
        return mean, torch.full_like(mean, math.inf)
    residuals = sums - mean * lengths
    return mean, (residuals.pow(2).sum(0) * num / (num - 1)).sqrt() / total


def tour_sums(values, tours):
    """``(sums, lengths)`` per tour of per-draw ``values`` ``[num_draws, ...]``: ``tours``
    names each draw's tour (any labels; a tour's draws need not be contiguous)."""
    values = torch.as_tensor(values, dtype=torch.float64)
    labels = {}
    index = torch.tensor([labels.setdefault(t, len(labels)) for t in tours], dtype=torch.long)
    if index.numel() != values.shape[0]:
        raise ValueError(f"tours names {index.numel()} draws, values have {values.shape[0]}")
    sums = torch.zeros((len(labels),) + values.shape[1:], dtype=torch.float64)
    sums.index_add_(0, index, values)
    lengths = torch.bincount(index, minlength=len(labels)).to(torch.float64)
    return sums, lengths


def regenerative_error(values, tours):
    """The Monte Carlo error of the mean over the draws of ``values`` ``[num_draws, ...]``,
    each draw credited to its tour in ``tours``; see the module."""
    return ratio_error(*tour_sums(values, tours))[1]


class ColdTours:
    """
    The cold chain's draws of the sampling phase, kept by tour: per tour the sum of every latent
    coordinate (float64), each draw's tour (:attr:`tours`, numbered in order of appearance) and
    all the draws' mean and variance (:class:`pyro.ops.welford.WelfordCovariance`). :meth:`add`
    takes each draw, constrained as :meth:`~pyro.infer.MCMC.get_samples` gives it.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("tours", "sums", "lengths", "shapes", "_numbers", "_moments")
    REBUILT = ()

    def __init__(self):
        from pyro.ops.welford import WelfordCovariance

        self.tours = []  # per draw, its tour's number
        self.sums = []
        self.lengths = []
        self.shapes = None
        self._numbers = {}
        # made here, not at the first draw: a resumed run restores its state into this one
        self._moments = WelfordCovariance(diagonal=True)

    @property
    def num_draws(self):
        return len(self.tours)

    def add(self, values, tour):
        """One draw ``values`` ``{site: tensor}`` made on ``tour`` (a hashable label,
        :attr:`~pyro_pt.lineages.IndexProcess.cold_tour`)."""
        if self.shapes is None:
            self.shapes = {name: tuple(v.shape) for name, v in values.items()}
        flat = torch.cat([values[name].detach().reshape(-1).to(torch.float64).cpu()
                          for name in self.shapes]) if self.shapes else torch.zeros(0)
        number = self._numbers.setdefault(tour, len(self._numbers))
        if number == len(self.sums):
            self.sums.append(torch.zeros_like(flat))
            self.lengths.append(0)
        self.sums[number] += flat
        self.lengths[number] += 1
        self.tours.append(number)
        self._moments.update(flat)

    @classmethod
    def merged(cls, parts):
        """The draws of independent chains' ``parts`` (each a :class:`ColdTours`) as one record,
        in order: every part's tours kept apart, the moments combined (Chan et al.'s pairwise
        update of the mean and the sum of squares)."""
        out = cls()
        n, mean, m2 = 0, None, None
        for part in parts:
            offset = len(out.sums)
            out.shapes = out.shapes or part.shapes
            out.sums += [s.clone() for s in part.sums]
            out.lengths += list(part.lengths)
            out.tours += [offset + t for t in part.tours]
            k = part._moments.n_samples
            if not k:
                continue
            part_mean, part_m2 = part._moments._mean, part._moments._m2
            if n == 0:
                n, mean, m2 = k, part_mean.clone(), part_m2.clone()
                continue
            delta = part_mean - mean
            total = n + k
            mean = mean + delta * (k / total)
            m2 = m2 + part_m2 + delta.pow(2) * (n * k / total)
            n = total
        if n:
            out._moments.n_samples, out._moments._mean, out._moments._m2 = n, mean, m2
        out._numbers = {t: t for t in range(len(out.sums))}
        return out

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

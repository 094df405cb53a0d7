r"""
Subnetwork selection: which S of the D latent coordinates get a full-covariance posterior.

Every ranking works within the *candidates*: the coordinates of ``selection_sites`` (all D when
it is ``None``); the other latents stay at the MAP. With :math:`\sigma_d^2` a marginal
posterior variance (``variance=``: diagonal Laplace ``1 / diag(GGN + P)``, diagonal SWAG or the
diagonal of the full inverse) and :math:`E_d = \sum_n J_{dn}^\top F_n J_{dn}` the Jacobian
energy of coordinate ``d`` on the training data (the GGN diagonal):

- ``"predictive"`` (the default) keeps the S largest

  .. math::

      \sigma_d^2 \, E_d \;=\; \sum_n \sigma_d^2\, J_{dn}^\top F_n J_{dn},

  what coordinate ``d`` alone adds to the linearized predictive variance of the training
  points (in Fisher units), i.e. what dropping it costs the predictive under a diagonal
  posterior. With diagonal Laplace variances this is :math:`E_d / (E_d + P_{dd})`, the share
  of the coordinate's precision that comes from the data (its term of MacKay's effective number
  of parameters). A coordinate with :math:`E_d = 0` (the weights of a ReLU unit dead on every
  training input) changes no prediction on the data and is never selected; when fewer than S
  coordinates have :math:`E_d > 0` the subnetwork is that smaller set, with a warning.
- ``"wasserstein"`` keeps the S largest :math:`\sigma_d^2`, the minimizer of the diagonal
  Wasserstein-2 bound of Daxberger et al. (2021). It is preferable only when every coordinate
  is informed by the data (smooth activations, no dead units); otherwise it ranks the
  coordinates the data never touches first, since they keep their prior variance, and the
  subnetwork adds no predictive uncertainty at all.
- ``"random"``: S candidates uniformly at random (``torch.randperm``, Pyro's seed); a baseline.
- ``"magnitude"``: the S largest :math:`|\hat u_d|`.
- ``"last_layer"``: every coordinate of the last layer (:func:`last_layer_sites`); no size.

On Figure 2's toy of Daxberger et al. (1-50-50-1 ReLU, 3 seeds, ``examples/subnet_regression.py``)
``"predictive"`` beats random and Wasserstein subnetworks of the same size on the held-out
log-likelihood between the clusters at 1 %, 3 % and 50 % (per point, 1 %: -1.18 against random
-6.61; 3 %: -0.54 against -6.19, full covariance -0.48), and its 3 % subnetwork beats diagonal
Laplace inside them; 1 % and 3 % Wasserstein subnetworks have the MAP's predictive std.
``benchmarks/subnet_selection.py`` compares the alternatives on that toy (README there): exact
variances rank about as well as diagonal ones, at a D x D inverse (``variance="exact"``, small
D only); Jacobian energy on probe inputs spread around the data ranks worse; restricting the
Wasserstein rule to coordinates the data see does not rescue it at small sizes. Prefer
``"random"`` only as a baseline, ``"last_layer"`` when the hidden layers should stay at the MAP.

**References**

[1] E. Daxberger et al., "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
[2] D. J. C. MacKay, "Bayesian Interpolation", Neural Computation 4(3), 1992.
"""

import numbers
import warnings

import torch

from . import prior
from .comm import LocalComm
from .curvature import _depends_on
from .likelihoods import OutputSpec, unwrap
from .variance import (  # noqa: F401 (the estimators' public home is here too)
    EXACT_MAX_DIM, diag_laplace_variance, diag_precision, exact_variance, jacobian_energy, swag_variance,
)
from .warning import SubnetWarning

STRATEGIES = ("predictive", "wasserstein", "random", "magnitude", "last_layer")
VARIANCES = ("diag_laplace", "swag", "exact")


def check_size(subnetwork_size):
    """``subnetwork_size`` as given: ``None``, a count (an int >= 1) or a fraction (a float in
    (0, 1]); a ``TypeError`` or ``ValueError`` saying so for anything else."""
    if subnetwork_size is None:
        return None
    # a bool is an int to Python, but subnetwork_size=True is no count anyone means
    if isinstance(subnetwork_size, bool) or not isinstance(subnetwork_size, (numbers.Integral, float)):
        raise TypeError(
            "subnetwork_size must be a count (an int >= 1) or a fraction of the candidate coordinates "
            f"(a float in (0, 1]), got {subnetwork_size!r}"
        )
    if isinstance(subnetwork_size, float):
        if not 0 < subnetwork_size <= 1:
            raise ValueError(f"subnetwork_size as a fraction (a float) must lie in (0, 1], got {subnetwork_size}; "
                             "pass a count as an int, e.g. subnetwork_size=10")
        return subnetwork_size
    if subnetwork_size < 1:
        raise ValueError(f"subnetwork_size as a count (an int) must be at least 1, got {subnetwork_size}; "
                         "pass a count >= 1 or a fraction in (0, 1]")
    return int(subnetwork_size)


def resolve_size(subnetwork_size, D, sites=None):
    """A count in ``[1, D]`` from a count or a fraction of the D candidates (the coordinates of
    ``sites``, else every latent coordinate)."""
    size = check_size(subnetwork_size)
    if isinstance(size, float):
        return max(1, int(round(size * D)))
    if size > D:
        among = "latent coordinates" if sites is None else f"coordinates of selection_sites={list(sites)}"
        raise ValueError(
            f"subnetwork_size={size} is more than the model's {D} {among}; pass a count of at most {D}, "
            "or a fraction (subnetwork_size=1.0 is all of them)"
        )
    return size


def explicit(selection, D, blocks):
    """Indices from a list of site names, an index tensor or a boolean mask; else ``None``."""
    if isinstance(selection, (list, tuple)) and all(isinstance(s, str) for s in selection):
        if not selection:
            raise ValueError("selection is an empty list of sites; name at least one latent site")
        unknown = [s for s in selection if s not in blocks]
        if unknown:
            raise ValueError(f"selection names unknown latent sites {unknown}; latent sites are {list(blocks)}")
        return torch.cat([torch.arange(*blocks[s]) for s in selection]).sort().values
    if isinstance(selection, (list, tuple)) or torch.is_tensor(selection):
        idx = torch.as_tensor(selection)
        if idx.dtype == torch.bool:
            if idx.shape != (D,):
                raise ValueError(f"a boolean selection mask must have shape ({D},), got {tuple(idx.shape)}")
            idx = idx.nonzero().reshape(-1)
        elif idx.dtype.is_floating_point or idx.dim() != 1:
            raise TypeError("an index selection must be a 1-d integer tensor (or a boolean mask)")
        if idx.numel() == 0:
            raise ValueError("the selection is empty; select at least one coordinate")
        if idx.min() < 0 or idx.max() >= D:
            raise ValueError(f"selection indices must lie in [0, {D}), got range [{idx.min()}, {idx.max()}]")
        idx = idx.long().sort().values
        if (idx[1:] == idx[:-1]).any():
            raise ValueError("selection indices contain duplicates; pass each coordinate once")
        return idx
    return None


def top(scores, size):
    """Indices of the ``size`` largest scores, sorted ascending by index."""
    return torch.topk(scores, size).indices.sort().values


def candidates(latent, sites, device=None):
    """The flat coordinates of the latent ``sites`` (all D when ``None``), sorted."""
    if sites is None:
        return torch.arange(sum(b - a for a, b in latent.blocks.values()), device=device)
    unknown = [s for s in sites if s not in latent.blocks]
    if unknown:
        raise ValueError(f"selection_sites names unknown latent sites {unknown}; latent sites are {list(latent.blocks)}")
    return torch.cat([torch.arange(*latent.blocks[s], device=device) for s in sorted(set(sites), key=list(latent.blocks).index)])


def num_candidates(guide, latent, D):
    """How many coordinates a ranking chooses among: those of ``selection_sites``, else all D
    (the ``D`` of the paper's ``S / D`` prior rescaling)."""
    sites = getattr(guide, "selection_sites", None)
    return D if sites is None else len(candidates(latent, sites))


def select(guide, latent, u_hat, chunks, batches, comm=LocalComm()):
    """
    The sorted subnetwork indices for the guide's ``selection``, ``subnetwork_size``,
    ``selection_sites``, ``variance`` and ``prior_scale``; across processes (``comm``, each
    rank with its shard) the rankings' data terms are summed over the ranks first. Sets
    ``guide.marginal_variance`` (zero outside the candidates: they stay at the MAP) and, when
    computed, ``guide.jacobian_energy`` (NaN outside the candidates); ``None`` when not computed.
    """
    D = u_hat.numel()
    guide.marginal_variance = guide.jacobian_energy = None
    sites = getattr(guide, "selection_sites", None)
    idx = explicit(guide.selection, D, latent.blocks)
    if idx is not None:
        if sites is not None:
            raise ValueError("selection_sites restricts a ranking; an explicit selection already names its "
                             "coordinates: leave selection_sites=None")
        return idx.to(u_hat.device)
    pool = candidates(latent, sites, u_hat.device)
    if guide.selection == "last_layer":
        if guide.subnetwork_size is not None:
            raise ValueError('selection="last_layer" takes every coordinate of the last layer; leave '
                             'subnetwork_size=None, or rank within it: selection_sites=[its sites]')
        names = last_layer_sites(latent, u_hat, *batches[0])
        if sites is not None and not set(names) <= set(sites):
            raise ValueError(f'selection="last_layer" is the sites {names}, not all in selection_sites={sites}; '
                             "drop selection_sites or add them")
        return candidates(latent, names, u_hat.device)
    size = resolve_size(guide.subnetwork_size, len(pool), sites)
    if size == len(pool):  # the full posterior over the candidates: nothing to rank
        return pool
    if guide.selection == "random":
        return pool[torch.randperm(len(pool))[:size].to(pool.device)].sort().values
    if guide.selection == "magnitude":
        return pool[top(u_hat[pool].abs(), size)]
    # the ranking sees the full network's prior: "subnet" forms at S / D = 1, fitted ones at 1
    c = prior.prior_scale_multiplier(guide.prior_scale) or 1.0
    energy = None
    if guide.selection == "predictive" or guide.variance == "diag_laplace":
        energy = comm.all_reduce_sum(jacobian_energy(latent, u_hat, pool, chunks), "sum of the Jacobian energies")
        guide.jacobian_energy = torch.full_like(u_hat, float("nan")).index_copy(0, pool, energy)
    if guide.variance == "diag_laplace":
        prec = diag_precision(latent, u_hat, chunks, c, pool, energy, comm)
        var64 = torch.where(prec > 0, prec.reciprocal(), torch.full_like(prec, float("inf")))
    elif guide.variance == "exact":
        var64 = exact_variance(latent, u_hat, chunks, c, idx=pool, comm=comm).double()
    else:
        var64 = swag_variance(latent, u_hat, batches, **guide.variance_options)[pool].double()  # unsplit calls
    guide.marginal_variance = torch.zeros_like(u_hat).index_copy(0, pool, var64.to(u_hat.dtype))
    if guide.selection == "wasserstein":
        return pool[top(var64, size)]
    scores = predictive_scores(energy, var64)
    seen = int((scores > -float("inf")).sum())
    if seen < size:
        warnings.warn(
            f"only {seen} of the {len(pool)} candidate coordinates have a nonzero Jacobian on the data; "
            f'selection="predictive" keeps those {seen} instead of {size} (the others change no '
            "prediction on the training inputs)", SubnetWarning,
        )
        size = seen
    return pool[top(scores, size)]


def predictive_scores(energy, variance):
    """:math:`\\sigma_d^2 E_d`, minus infinity where the Jacobian energy is zero (relative to the
    largest, at the dtype's resolution: a dead unit's exact zero, not a small gradient)."""
    seen = energy > torch.finfo(energy.dtype).eps * energy.max()
    if not seen.any():
        raise ValueError("no candidate coordinate moves the observed sites' parameters on these data "
                         "(zero Jacobian everywhere): check the model and selection_sites")
    prod = torch.where(variance.isinf(), variance, variance * energy.double())
    return torch.where(seen, prod, torch.full_like(prod, -float("inf")))


def last_layer_sites(latent, u_hat, args, kwargs):
    """
    The last layer: the latent site with a matrix-shaped unconstrained value that, of those on
    which an observed site's distribution parameters depend, the model samples last (the last
    weight matrix), and every non-matrix latent site sampled after it that feeds one of the same
    parameters (its bias; not, say, a noise scale, which feeds another parameter). Dependence
    is structural (autograd), so a matrix whose units are dead still counts.
    """
    order = [n for n in latent.trace(u_hat, args, kwargs)[0].nodes if n in latent.blocks]
    feeds = {}
    for name in order:
        a, b = latent.blocks[name]
        idx = torch.arange(a, b, device=u_hat.device)
        delta = u_hat[idx].clone().requires_grad_(True)
        tr, _ = latent.trace(u_hat, args, kwargs, idx, delta)
        feeds[name] = set()
        for obs in latent.observed:
            base = unwrap(tr.nodes[obs]["fn"])[0]
            for param in OutputSpec.natural_names(base):
                v = getattr(base, param)
                if torch.is_tensor(v) and v.requires_grad and _depends_on(v, delta):
                    feeds[name].add((obs, param))
    shapes = latent.guide._unconstrained_shapes
    matrices = [n for n in order if feeds[n] and len(shapes[n]) >= 2]
    if not matrices:
        raise ValueError('selection="last_layer" found no matrix-shaped latent site that feeds the observed '
                         "sites; name the sites instead, e.g. selection=['W_out', 'b_out']")
    last = matrices[-1]
    after = order[order.index(last) + 1:]
    return [last] + [n for n in after if len(shapes[n]) < 2 and feeds[n] & feeds[last]]

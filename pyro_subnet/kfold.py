r"""
K-fold cross-validation of a subnetwork Laplace posterior, with the MAP and the Laplace
approximation refitted without each fold: what :func:`pyro_subnet.loo` approximates, at the
cost of K fits, and the check to run where it warns.

Each point's score is its log predictive density under the posterior fitted without its fold,
in the linearized model the export describes, :math:`\log \frac1M \sum_m p(y_i \mid
\hat\eta_i + J_{Si} z_m)` with :math:`z_m` drawn from that posterior's Gaussian; masked points
score nothing. The folds are a seeded random partition of the data points.

Its effective number of parameters is ArviZ's (``loo_kfold`` of arviz-stats): the lppd of the
posterior fitted on all the data, :math:`\sum_i \log \frac1M \sum_m p(y_i \mid \hat\eta_i +
J_{Si} z_m)` in the same linearized model, minus the k-fold elpd.
"""

import math

import numpy as np
import torch
import xarray as xr

import pyro_arviz

from .curvature import _site_weight
from .likelihoods import unwrap
from .posterior import SubnetworkLaplacePosterior
from .predictive import linearized_outputs
from .reweighting import site_named


def _take(args, kwargs, size, index):
    """The call restricted to the data points ``index``: every top-level tensor whose leading
    dimension is ``size`` is indexed, everything else passed as it is."""

    def cut(v):
        return v[index] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == size else v

    return tuple(cut(v) for v in args), {k: cut(v) for k, v in kwargs.items()}


def _data_size(args, kwargs, num_data):
    if num_data is not None:
        return int(num_data)
    leading = {v.shape[0] for v in list(args) + list(kwargs.values()) if torch.is_tensor(v) and v.dim() > 0}
    leading.discard(1)
    if len(leading) != 1:
        raise ValueError(f"the model's tensor arguments have the leading sizes {sorted(leading)}: say which is "
                         "the number of data points with num_data=")
    return leading.pop()


@torch.no_grad()
def held_out_scores(posterior, args, kwargs, site, num_samples, chunk_size=None):
    """``(scores, kept)``: the log predictive density of each element of ``site`` on the call
    ``(args, kwargs)`` (a ``[n]`` tensor) and which of them are data (not masked)."""
    dz = posterior._offset_draws(num_samples)
    outputs = linearized_outputs(posterior, args, kwargs, dz, chunk_size)
    spec, fn, etas = outputs[site]
    trace, _ = posterior._latent.trace(posterior.loc, args, kwargs)
    node = trace.nodes[site]
    y = node["value"]
    ll = fn.log_prob(y).expand((num_samples,) + fn.batch_shape) if etas is None else spec.log_prob(etas, y)
    ll = ll.reshape(num_samples, -1)
    weight = _site_weight(node, spec).to(ll)
    inner = unwrap(node["fn"])[3]  # a dist.mask(): no data either
    if inner is not None:
        weight = weight * inner.to(ll).expand(spec.element_shape).reshape(-1)
    if weight.numel() != ll.shape[1]:
        raise ValueError(f"observed site '{site}' has event dims: k-fold scores one element per data point")
    return (torch.logsumexp(ll, 0) - math.log(num_samples)) * weight, weight != 0


def kfold(fit, *args, folds=10, num_samples=1000, var_name=None, num_data=None, seed=0, chunk_size=None,
          posterior=None, **kwargs):
    r"""
    K-fold cross-validation with a refit per fold (module docstring).

    Example::

        def fit(x, y):
            pyro.clear_param_store()
            guide = SubnetworkLaplace(model, subnetwork_size=0.05)
            svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
            for _ in range(3000):
                svi.step(x, y)
            return guide.laplace_approximation(x, y)

        cv = pyro_subnet.kfold(fit, x, y, folds=10)
        az.compare({"subnet": cv, "mcmc": az.loo(idata_mcmc, pointwise=True)})

    :param callable fit: ``fit(*args, **kwargs)`` on a fold's training points, returning the
        :class:`~pyro_subnet.SubnetworkLaplacePosterior` fitted on them.
    :param args: the model's arguments on all the data; each top-level tensor whose leading
        dimension is the number of data points is split into folds.
    :param int folds: the number of folds (``folds = N`` is leave-one-out with refits).
    :param int num_samples: draws of each fold's posterior for the held-out scores.
    :param str var_name: the observed site to score (needed with several).
    :param int num_data: the number of data points, where the arguments' leading sizes do not say.
    :param int seed: the seed of the random partition.
    :param SubnetworkLaplacePosterior posterior: the posterior fitted on all the data, for the
        lppd of ``p_loo`` (module docstring); ``fit(*args, **kwargs)`` gives it where not given
        (one fit more than the folds).
    :returns: ArviZ's ELPD data, pointwise: arviz-stats' k-fold ``ELPDData`` under ArviZ >= 1;
        under ArviZ < 1, which has no k-fold type, an ``ELPDData`` labelled as ``loo``
        (``elpd_loo``, ``loo_i``) so that ``az.compare`` takes it beside PSIS-LOO results, with
        the entry ``kfold`` holding the number of folds.
    """
    if not callable(fit):
        raise TypeError(f"fit must be a function of the training data returning the fitted posterior, got {fit!r}")
    if not (isinstance(num_samples, int) and num_samples >= 1):
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if posterior is not None and not isinstance(posterior, SubnetworkLaplacePosterior):
        raise TypeError("posterior must be the SubnetworkLaplacePosterior fitted on all the data (or None, and fit "
                        f"gives it), got {type(posterior).__name__}")
    n = _data_size(args, kwargs, num_data)
    if not (isinstance(folds, int) and 2 <= folds <= n):
        raise ValueError(f"folds must be an int between 2 and the {n} data points, got {folds!r}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    scores = torch.zeros(n, dtype=torch.float64)
    kept = torch.zeros(n, dtype=torch.bool)
    site = var_name
    for f in range(folds):
        held = order[f::folds].sort().values
        train = torch.ones(n, dtype=torch.bool)
        train[held] = False
        train_args, train_kwargs = _take(args, kwargs, n, train.nonzero().reshape(-1))
        fold = fit(*train_args, **train_kwargs)
        site = site_named(fold._latent.observed, site, "the model")
        held_args, held_kwargs = _take(args, kwargs, n, held)
        s, k = held_out_scores(fold, held_args, held_kwargs, site, num_samples, chunk_size)
        if s.numel() != len(held):
            raise ValueError(f"observed site '{site}' has {s.numel()} elements for {len(held)} held-out points: "
                             "k-fold needs one element per data point (pass num_data= if the data size was misread)")
        scores[held], kept[held] = s.double().cpu(), k.cpu()
    if posterior is None:
        posterior = fit(*args, **kwargs)
    in_sample, k = held_out_scores(posterior, args, kwargs, site, num_samples, chunk_size)
    if in_sample.numel() != n or not torch.equal(k.cpu(), kept):
        raise ValueError(f"the posterior fitted on all the data scores {in_sample.numel()} elements of '{site}' "
                         f"({int(k.sum())} kept) where the folds scored {n} ({int(kept.sum())} kept): pass the "
                         "posterior fitted on these arguments, or none (fit gives it)")
    lppd = float(in_sample.double().cpu()[kept].sum())
    return _result(scores[kept], kept.nonzero().reshape(-1), site, folds, num_samples, lppd)


def _result(scores, points, site, folds, num_samples, lppd):
    dim = f"{site}_dim_0"
    elpd_i = xr.DataArray(scores.numpy(), dims=(dim,), coords={dim: points.numpy()})
    elpd, n = float(elpd_i.sum()), int(elpd_i.size)
    se = math.sqrt(n * float(np.var(elpd_i.values)))
    p_loo = lppd - elpd
    if pyro_arviz.arviz_generation() == 0:
        import arviz as az

        return az.ELPDData(
            data=[elpd, se, p_loo, num_samples, n, False, elpd_i.rename("loo_i"), "log", folds],
            index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning", "loo_i", "scale", "kfold"],
        )
    from arviz_stats.utils import ELPDDataLOOKFold

    return ELPDDataLOOKFold(elpd=elpd, se=se, p=p_loo, n_samples=num_samples, n_data_points=n, scale="log",
                            warning=False, good_k=0.7, elpd_i=elpd_i, n_folds=folds)

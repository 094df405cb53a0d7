r"""
Leave-one-out cross-validation of a subnetwork Laplace posterior, corrected for its Gaussian.

PSIS-LOO (Vehtari et al. 2017, 2024) estimates :math:`p(y_i \mid y_{-i})` from posterior draws
with the importance ratios :math:`1 / p(y_i \mid \theta)`. The draws of a
:class:`~pyro_subnet.SubnetworkLaplacePosterior` come from its Gaussian :math:`q`, not from the
posterior :math:`p(\theta \mid y) \propto p(\theta, y)` of the model the export describes, so
the ratio for leaving out point :math:`i` is (Magnusson et al. 2019)

.. math::

    r_i(\theta) \;\propto\; \frac{p(\theta, y)}{q(\theta)\; p(y_i \mid \theta)},
    \qquad
    \widehat{\mathrm{elpd}}_i = \log \frac{\sum_m \tilde r_i(\theta_m)\, p(y_i \mid \theta_m)}
                                          {\sum_m \tilde r_i(\theta_m)},

with :math:`\tilde r_i` the Pareto-smoothed ratios and :math:`\theta_m \sim q`. Where the
Laplace approximation is the posterior (a linear-Gaussian model), :math:`p(\theta, y) / q(\theta)`
is constant and this is the usual PSIS-LOO. That leaves point :math:`i` out of the S coordinates
only: the others stay at a MAP fitted with it. Given the model, :func:`loo` therefore first moves
the MAP without each point by one Newton step (:mod:`pyro_subnet.jackknife`) and the draws to
that point's leave-one-out Gaussian (:mod:`pyro_subnet.reweighting`). The export keeps :math:`\log p(\theta_m, y)` and
:math:`\log q(\theta_m)` in ``sample_stats`` (``lp``, ``log_q``; see :mod:`pyro_subnet.arviz`).

The Pareto :math:`\hat k` of each point says whether its smoothed ratios can be trusted: above
ArviZ's threshold (0.7 for 2200 draws or more, lower for fewer) the estimate of that point is
unreliable, and when that holds for more than 10 % of the points the elpd is not a number to
rank models by. :func:`loo` then warns with a :class:`SubnetLOOWarning`, as it does when the
correction cannot be made. The warning gives the Pareto k of :math:`p / q` over all draws
(:func:`approximation_pareto_k`): when that is high too, it is the Gaussian that fails, not the
leaving out, and no reweighting of these draws can be trusted.

**References**

[1] A. Vehtari, A. Gelman, J. Gabry, "Practical Bayesian model evaluation using leave-one-out
    cross-validation and WAIC", Statistics and Computing 27(5), 2017.
[2] A. Vehtari, D. Simpson, A. Gelman, Y. Yao, J. Gabry, "Pareto smoothed importance
    sampling", JMLR 25(72), 2024.
[3] M. Magnusson, M. R. Andersen, J. Jonasson, A. Vehtari, "Bayesian leave-one-out
    cross-validation for large data", ICML 2019.
[4] Y. Yao, A. Vehtari, D. Simpson, A. Gelman, "Yes, but did it work?: Evaluating variational
    inference", ICML 2018.
"""

import math
import warnings

import numpy as np
import torch
import pyro_arviz

from .reweighting import elpd_data, site_named
from .warning import SubnetWarning

MAX_STEP_RATIO = 0.5  # a second Newton step over half the first: the MAP's move is not one step
MAX_BAD_SHARE = 0.1  # above this share of points with a high Pareto k, the elpd is not trusted
# measured on two moons (benchmarks/subnet_loo.py): a smaller S lowered the share; a prior scale
# other than 1 on a MAP fitted under the model's own prior, and the network predictive, raised it
_ADVICE = ("score held-out data or refit per fold (pyro_subnet.kfold); or try a smaller subnetwork_size "
           "(q must match the posterior in all S directions); with a prior_scale other than 1, rescale the "
           "model's prior itself and refit the MAP (q is centred at the MAP of the prior the MAP phase used, "
           "not at the mode of the rescaled posterior)")


class SubnetLOOWarning(SubnetWarning):
    """A leave-one-out estimate of a subnetwork Laplace posterior that is not to be trusted."""


def loo(data, *args, num_samples=1000, predictive="linearized", var_name=None, chunk_size=None, map_shift=True,
        **kwargs):
    r"""
    PSIS-LOO of a subnetwork Laplace posterior, with the MAP moved without each point and the
    importance ratios corrected for drawing from the Laplace Gaussian :math:`q` (module docstring).

    Given the posterior and the model's arguments (``loo(posterior, x, y)``, the linearized
    predictive, ``map_shift=True``), each point's draws are moved to where the MAP and the
    Gaussian would be without it (:mod:`pyro_subnet.jackknife`, :mod:`pyro_subnet.reweighting`),
    and the result says which curvature the steps used (``map_shift``: ``"full GGN"`` up to
    4096 coordinates, ``"diagonal GGN"`` above) and how far each step can be trusted
    (``step_ratio``). An export (``loo(idata)``) holds no model to move the MAP with: its
    estimate counts each point in the fit of the coordinates outside S, and is optimistic.

    Under ArviZ >= 1 the unmoved estimate of an export is arviz-stats'
    ``loo_approximate_posterior``; otherwise the log ratios are smoothed with ArviZ's PSIS and
    summarised as ``loo`` does (the same elpd, se and p_loo). The draws are independent, so the
    relative efficiency is 1.

    Warns (:class:`SubnetLOOWarning`, each at most once per call) when the MAP is not moved
    (an export, ``map_shift=False``, ``predictive="network"``, or a step that cannot be made),
    when more than 10 % of the points have a step ratio above 0.5 or a Pareto k above ArviZ's
    threshold, when the model itself at the moved MAPs scores the left-out points more than
    the elpd's SE apart from the linearized model (``linearization_gap``, per point), when a
    point alone pins a direction of the MAP, and when an export holds no ``lp`` and ``log_q`` to
    correct with. Each says what
    to do: held-out data, or :func:`pyro_subnet.kfold` (a refit per fold), where these fail.

    Example::

        elpd = pyro_subnet.loo(posterior, x, y, num_samples=2000)
        az.compare({"subnet": elpd, "mcmc": az.loo(idata_mcmc, pointwise=True)})

    :param data: a :class:`~pyro_subnet.SubnetworkLaplacePosterior` with the model arguments
        ``args``/``kwargs``, or its export (an ``InferenceData`` or ``DataTree``).
    :param int num_samples: draws of ``q``, for a posterior.
    :param str predictive: the export's ``predictive``, for a posterior.
    :param str var_name: the observed site to leave points of out (needed with several).
    :param int chunk_size: inputs per chunk of the linearization, for a posterior.
    :param bool map_shift: move the MAP without each point (a posterior only).
    :returns: ArviZ's ELPD data, pointwise (``pareto_k`` and the pointwise elpd included):
        an ``ELPDData`` under ArviZ < 1 (``elpd_loo``, ``p_loo``, ``loo_i``...), arviz-stats'
        ``ELPDData`` (``elpd``, ``p``, ``elpd_i``...) under ArviZ >= 1.
    """
    from .arviz import CONDITIONAL, as_arviz_log_likelihood, to_inference_data
    from .posterior import SubnetworkLaplacePosterior

    unmoved = "the export holds no model to move it with; call loo(posterior, *model_args)"
    if isinstance(data, SubnetworkLaplacePosterior):
        if not (isinstance(num_samples, int) and num_samples >= 2):
            raise ValueError(f"num_samples must be an int of at least 2 (draws of q per point), got {num_samples!r}")
        unmoved = ("map_shift=False" if not map_shift else
                   f'predictive="{predictive}" (the steps are those of the linearized model)')
        if map_shift and predictive == "linearized":
            from .reweighting import shifted_loo

            try:
                result = shifted_loo(data, args, kwargs, num_samples, var_name, chunk_size)
            except (ValueError, MemoryError, torch.linalg.LinAlgError, torch.OutOfMemoryError) as e:
                if "var_name" in str(e):
                    raise
                unmoved = f"its step cannot be made here: {e}"
            else:
                _check_steps(result)
                _check_pareto_k(result, None, stacklevel=3)
                return result
        data = to_inference_data(data, *args, num_samples=num_samples, predictive=predictive,
                                 chunk_size=chunk_size, **kwargs)
    elif args or kwargs:
        raise TypeError("loo takes model arguments only with a SubnetworkLaplacePosterior; "
                        f"got them with a {type(data).__name__}: pass loo(posterior, x, y) or loo(idata)")
    elif not {CONDITIONAL, "log_likelihood"} & set(pyro_arviz.groups_of(data)):
        raise ValueError(f"data has no {CONDITIONAL} (or log_likelihood) group: pass a SubnetworkLaplacePosterior "
                         "with the model's arguments, or its export pyro_subnet.to_inference_data(posterior, x, y)")
    # ArviZ's importance sampling reads the values from log_likelihood; the ratios here are this module's
    data = as_arviz_log_likelihood(data)
    _log_likelihood(data, var_name)  # a missing or ambiguous site is named here, for both generations
    if not _is_full(data):
        warnings.warn(f"the MAP is not moved without each point ({unmoved}): the coordinates outside the "
                      "subnetwork stay where every point put them, so this elpd is optimistic (an overfitted "
                      "network can look ten times better than held-out data); use loo(posterior, *model_args), "
                      "pyro_subnet.kfold, or held-out data.", SubnetLOOWarning, stacklevel=2)
    densities = _densities(data)
    approximate = _approximate_loo()
    if densities is None or approximate is None:
        why = ("has no finite lp and log_q in sample_stats (export it with pyro_subnet.to_inference_data "
               "and log_densities=True)" if densities is None else
               "is not corrected: the installed arviz-stats has no loo_approximate_posterior")
        warnings.warn(f"this leave-one-out estimate {why}; the draws of a subnetwork Laplace posterior come "
                      "from its Gaussian, not from the posterior that PSIS-LOO assumes, so the elpd and its "
                      "Pareto k are uncorrected.", SubnetLOOWarning, stacklevel=2)
        result = _plain_loo(data, var_name)
    else:
        result = approximate(data, *densities, var_name=var_name)
    _check_pareto_k(result, data, stacklevel=3)
    return result


def _is_full(data):
    """Whether the export's subnetwork is every coordinate (nothing outside S to move)."""
    attrs = data["log_likelihood"].attrs
    return "coordinates" in attrs and attrs.get("subnetwork_size") == attrs["coordinates"]


def _check_steps(result):
    ratio = np.asarray(result["step_ratio"] if hasattr(result, "index") else result.step_ratio)
    share = float((ratio > MAX_STEP_RATIO).mean())
    if np.isinf(ratio).any():  # each is an unbounded error, however few
        warnings.warn(f"{int(np.isinf(ratio).sum())} points alone pin a direction of the MAP (without one, the "
                      "curvature is not positive there), so no step says where it goes: their elpd is not to be "
                      "trusted; score held-out data, or refit without each fold (pyro_subnet.kfold).",
                      SubnetLOOWarning, stacklevel=3)
    elif share > MAX_BAD_SHARE:
        warnings.warn(f"{share:.0%} of the points move the MAP too far for one Newton step to say where (the "
                      f"next step is over {MAX_STEP_RATIO} of the first, or the point alone pins a direction): "
                      "this elpd is not to be trusted; score held-out data, or refit without each fold "
                      "(pyro_subnet.kfold).", SubnetLOOWarning, stacklevel=3)
    gap = float(np.sum(result["linearization_gap"] if hasattr(result, "index") else result.linearization_gap))
    se = float(result["se"] if hasattr(result, "index") else result.se)
    if abs(gap) > se:
        warnings.warn(f"at the moved MAPs the model itself scores the left-out points {gap:+.0f} nats apart from the "
                      f"linearized model the steps are taken in, more than the elpd's SE ({se:.0f}): this is the "
                      "leave-one-out of the network linearized at the MAP, not of the network; check it with "
                      "pyro_subnet.kfold or held-out data.", SubnetLOOWarning, stacklevel=3)


def _densities(data):
    """``(lp, log_q)`` DataArrays ``(chain, draw)`` of the export, or ``None`` where absent or NaN."""
    if "sample_stats" not in pyro_arviz.groups_of(data):
        return None
    stats = data["sample_stats"]
    names = set(stats.data_vars) if hasattr(stats, "data_vars") else set(stats)
    if not {"lp", "log_q"} <= names:
        return None
    lp, log_q = stats["lp"], stats["log_q"]
    if np.isnan(lp.values).any() or np.isnan(log_q.values).any() or np.isinf(log_q.values).any():
        return None
    return lp, log_q


def _approximate_loo():
    """ArviZ's approximate-posterior LOO where it has one, else this module's (ArviZ < 1)."""
    if pyro_arviz.arviz_generation() == 0:
        return _loo_psislw
    try:
        from arviz_stats import loo_approximate_posterior
    except ImportError:
        return None

    def run(data, lp, log_q, var_name=None):
        return loo_approximate_posterior(data, log_p=lp, log_q=log_q, pointwise=True, var_name=var_name)

    return run


def _plain_loo(data, var_name):
    import arviz as az

    return az.loo(data, pointwise=True, var_name=var_name)


def _log_likelihood(data, var_name):
    ds = data["log_likelihood"]
    return ds[site_named(list(ds.data_vars), var_name, "the log_likelihood group")]


def _loo_psislw(data, lp, log_q, var_name=None):
    """The corrected PSIS-LOO under ArviZ < 1, in ``arviz.loo``'s pointwise ``ELPDData``."""
    ll = _log_likelihood(data, var_name).stack(__sample__=("chain", "draw"))
    correction = (lp - log_q).stack(__sample__=("chain", "draw"))
    return elpd_data(ll, -ll + correction, ll)


def pareto_k_share(result):
    """The share of points whose Pareto k exceeds the result's ``good_k`` threshold, and that threshold."""
    k = np.asarray(result["pareto_k"] if pyro_arviz.arviz_generation() == 0 else result.pareto_k)
    good_k = float(result["good_k"] if pyro_arviz.arviz_generation() == 0 else result.good_k)
    return float((k > good_k).mean()), good_k


def approximation_pareto_k(data):
    r"""
    The Pareto :math:`\hat k` of the importance weights :math:`p(\theta, y) / q(\theta)` over all
    draws of an export (Yao et al. 2018): above about 0.7 the Laplace Gaussian is too far from the
    posterior for importance sampling at all, and then every point's leave-one-out ratios inherit
    it. ``None`` where the export holds no ``lp`` and ``log_q``.
    """
    densities = _densities(data)
    if densities is None:
        return None
    log_weights = (densities[0] - densities[1]).stack(__sample__=("chain", "draw"))
    log_weights = log_weights - log_weights.max()
    if pyro_arviz.arviz_generation() == 0:
        import arviz as az

        return float(az.psislw(log_weights, reff=1.0)[1])
    import arviz_stats  # noqa: F401  (registers the azstats accessor)

    return float((-log_weights).azstats.psislw(dim="__sample__")[1])  # arviz-stats smooths minus its input


def _check_pareto_k(result, data, stacklevel):
    share, good_k = pareto_k_share(result)
    if share <= MAX_BAD_SHARE:
        return
    if data is None:
        why = "after moving the MAP and the Laplace Gaussian without each point"
    elif _is_corrected(result):
        k_q = approximation_pareto_k(data)
        why = (f"after the correction for the Laplace Gaussian q, whose own importance weights p/q have "
               f"Pareto k {k_q:.2f}: " + ("q is too far from the posterior for importance sampling" if k_q > good_k
                                         else "leaving these points out moves the posterior too far from q"))
    else:
        why = "without the correction for the Laplace Gaussian"
    warnings.warn(f"{share:.0%} of the points have a Pareto k above {good_k:.2f} {why}, and this elpd is "
                  f"not to be trusted; {_ADVICE}.", SubnetLOOWarning, stacklevel=stacklevel)


def _is_corrected(result):
    if pyro_arviz.arviz_generation() == 0:
        return "approx_posterior" in result.index and bool(result["approx_posterior"])
    return bool(getattr(result, "approx_posterior", False))

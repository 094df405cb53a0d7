r"""
ArviZ export of a :class:`~pyro_subnet.SubnetworkLaplacePosterior`: its draws, their pointwise
log-likelihood and predictive draws, for ArviZ's plots and for :func:`pyro_subnet.loo`, whose
result ``az.compare`` ranks against MAP, MCMC or parallel tempering on the same data.

The model the posterior describes is the linearized one (Immer et al., 2021): with draws
:math:`u_S^{(m)} \sim \mathcal N(\hat u_S, \Sigma_S)` of the subnetwork (every other coordinate
at the MAP), each observed site's natural parameters are

.. math::

    \eta^{(m)} = \hat\eta + J_S\,(u_S^{(m)} - \hat u_S),

and the export holds :math:`\log p(y_n \mid \eta^{(m)}_n)` and a draw from
:math:`p(\cdot \mid \eta^{(m)})`. Its pointwise predictive density
:math:`\frac1M \sum_m p(y_n \mid \eta_n^{(m)})` is the Monte Carlo form of
``posterior.predict(x).log_prob(y)``. Sampling the network itself, :math:`\eta(u^{(m)})`,
describes another model: a Gaussian over weights pushed through a nonlinear network is not what
the Laplace approximation fitted, and on a small BNN its draws can be far worse than the MAP
(with Pareto k above 1 for most points in PSIS-LOO); it remains available as
``predictive="network"``.

For leave-one-out cross-validation the export also keeps, in ``sample_stats``, two densities at
each draw :math:`u^{(m)}` (unconstrained, the S coordinates moved and the rest at the MAP):

- ``lp``: :math:`\log p(u^{(m)}, y)` of the model the draws went through, the sum of the
  export's own pointwise log-likelihood plus the prior the Laplace approximation used,
  :math:`c\,[\log p(T(u)) + \log|\det \partial T/\partial u|]` with :math:`c` the prior scale
  in use (for a Gaussian prior: the Gaussian with :math:`c` times its precision), plus the
  ``pyro.factor`` terms at the network itself (they are not linearized);
- ``log_q``: :math:`\log q(u_S^{(m)})`, the Laplace Gaussian's density of the S coordinates.

Their difference is what :func:`pyro_subnet.loo` needs to correct the importance ratios of
PSIS-LOO for draws that come from :math:`q` rather than from the posterior.

**No** ``log_likelihood`` **group.** ``az.loo`` and ``az.compare`` read the pointwise
log-likelihood of an export as that of draws from the posterior. These draws are not: they come
from :math:`q`, and they hold the coordinates outside S at a MAP that every point helped fit,
so leaving a point out of them leaves it out of S only (on linear regressions with S = 1 of 3
weights, ``az.compare`` put such an export 1.2-2.7 nats ahead of NUTS, where refits per point
put the two within 0.6 nats: ``benchmarks/subnet_loo.py --ranking``). So the export keeps :math:`\log p(y_n \mid \eta^{(m)})` in the group
``conditional_log_likelihood`` (:data:`CONDITIONAL`), which ArviZ does not read, and ``az.loo``
of the export refuses for want of a ``log_likelihood`` group. For ``az.compare`` pass
:func:`pyro_subnet.loo`'s result (PSIS-LOO with the MAP moved without each point and the draws
reweighted by :math:`p/q`), an ELPD ArviZ's ``compare`` takes beside the exports of MCMC runs;
docs/design.md, "Why the subnet export has no log_likelihood group", says why no values in a
``log_likelihood`` group could give it.

What the groups hold follows :mod:`pyro_arviz`: ``conditional_log_likelihood`` the ``obs=`` sites only
(``pyro.factor`` terms, which have no distribution to linearize, are in ``lp``; the MCMC exports
count them in ``log_likelihood``: docs/design.md, "``pyro.factor`` terms"); ``pyro.deterministic``
sites in ``posterior``, the model's own values at each draw (functions of the latents, not
outputs to linearize); masked observations left out of ``conditional_log_likelihood``, ``observed_data`` and ``posterior_predictive``, and of ``lp``
(:mod:`pyro_arviz.masked`). The points kept are those of the model traced at the MAP, whose
mask the curvature used; the network export refuses a mask that keeps others at a draw.

**References**

[1] A. Immer, M. Korzepa, M. Bauer, "Improving predictions of Bayesian neural nets via local
    linearization", AISTATS 2021.
"""

import torch
from torch.distributions import biject_to

import pyro_arviz
from pyro_arviz.convert import datasets
from pyro_arviz.masked import KeptPoints, check_same_points, check_some_data, data_groups
from pyro_arviz.sites import deterministic_sites, kept_points, scored_log_prob

from .guide import SubnetworkLaplace
from .posterior import SubnetworkLaplacePosterior
from .predictive import linearized_outputs

PREDICTIVES = ("linearized", "network")
# the group of the pointwise log-likelihood at q's draws: not "log_likelihood", which az.loo would
# read as that of posterior draws (module docstring)
CONDITIONAL = "conditional_log_likelihood"
LEAVE_ONE_OUT = ("the log-likelihood at draws of the subnetwork with every other coordinate at the MAP fitted to "
                 "all the points, not at posterior draws: for leave-one-out and az.compare use "
                 "pyro_subnet.loo(posterior, *model_args)")


def to_inference_data(posterior, *args, num_samples=500, predictive="linearized", chunk_size=None,
                      log_densities=True, **kwargs):
    r"""
    Draws ``num_samples`` latent vectors from a subnetwork Laplace posterior and returns an
    :class:`arviz.InferenceData` (an ``xarray.DataTree`` under ArviZ >= 1) with groups

    - ``posterior``: every latent site (constrained), one chain of ``num_samples`` draws, and
      every ``pyro.deterministic`` site, from the model traced at each draw;
    - ``conditional_log_likelihood``: the pointwise log-likelihood of each observed (``obs=``)
      site at each draw, in the linearized model (default) or the network itself
      (``predictive="network"``); not ``log_likelihood``, so that ``az.loo`` and ``az.compare``
      refuse the export rather than score its draws as posterior draws (module docstring):
      give them :func:`pyro_subnet.loo`'s result;
    - ``posterior_predictive``: one draw of each observed site per posterior draw, from the same;
    - ``observed_data``: the observed values;
    - ``sample_stats`` (with ``log_densities=True``): ``lp``, the log joint of the model the
      draws went through, and ``log_q``, the density of the draws under the Laplace Gaussian
      (module docstring), for :func:`pyro_subnet.loo`;

    and, on the first three, the attribute ``predictive`` saying which model the draws went
    through (with ``subnetwork_size`` and ``coordinates``, the D of the flat latent vector).

    Example::

        idata = to_inference_data(posterior, x, y, num_samples=1000)
        az.plot_ppc(idata)
        az.compare({"subnet": pyro_subnet.loo(posterior, x, y), "nuts": pyro_arviz.from_pyro(nuts)})

    :param SubnetworkLaplacePosterior posterior: from ``guide.laplace_approximation``.
    :param args: the model's arguments, including the observed data.
    :param int num_samples: number of posterior draws.
    :param str predictive: ``"linearized"`` (the model the posterior describes) or ``"network"``.
    :param int chunk_size: inputs per chunk of the linearization (see :mod:`pyro_subnet.predictive`).
    :param bool log_densities: whether to keep ``lp`` and ``log_q`` in ``sample_stats`` (one
        model trace per draw for the prior; the ``"network"`` export traces each draw anyway).
    :returns: ``arviz.InferenceData`` under ArviZ < 1, ``xarray.DataTree`` under ArviZ >= 1
        (:mod:`pyro_arviz`).
    """
    if not isinstance(posterior, SubnetworkLaplacePosterior):
        raise TypeError(
            "to_inference_data expects the SubnetworkLaplacePosterior returned by "
            f"guide.laplace_approximation(...), got {type(posterior).__name__}"
        )
    if not (isinstance(num_samples, int) and num_samples >= 1):
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if predictive not in PREDICTIVES:
        raise ValueError(f"predictive must be one of {PREDICTIVES}, got {predictive!r}")
    latent = posterior._latent
    with torch.no_grad():
        tr, _ = latent.trace(posterior.loc, args, kwargs)
    observed, kept = {}, {}
    for name in latent.observed:
        site = tr.nodes.get(name)
        if site is None or not site["is_observed"]:
            raise ValueError(
                f"observed site '{name}' has no data in this call; pass the model's "
                "arguments including the observed values, e.g. to_inference_data(posterior, x, y)"
            )
        observed[name] = site["value"]
        # the linearized model keeps the points the MAP's trace keeps (those the curvature counted)
        kept[name] = kept_points(site).to(site["value"].device)
    points = {name: KeptPoints(name, k.cpu().numpy()) for name, k in kept.items()}
    check_some_data(points)
    deterministic = [name for name, _ in deterministic_sites(tr)]
    draws = posterior.get_posterior().sample((num_samples,))
    post, pred, loglik = {}, {}, {}
    with torch.no_grad():
        if predictive == "network":
            for m, u in enumerate(draws):
                tr, _ = latent.trace(u, args, kwargs)
                for name in latent.latent_names + deterministic:
                    post.setdefault(name, []).append(tr.nodes[name]["value"])
                for name in latent.observed:
                    site = tr.nodes[name]
                    check_same_points(name, kept[name].cpu(), kept_points(site), f"draw {m}", "the MAP",
                                      "export predictive='linearized', which keeps the MAP's points")
                    loglik.setdefault(name, []).append(site["fn"].log_prob(observed[name]))
                    pred.setdefault(name, []).append(site["fn"].sample())
            post, pred, loglik = ({k: torch.stack(v) for k, v in d.items()} for d in (post, pred, loglik))
        else:
            values = latent.values(draws)[0]
            post = {name: values[name] for name in latent.latent_names}
            idx = posterior.subnetwork_indices
            dz = draws[:, idx] - posterior.loc[idx]
            for name, (spec, fn, etas) in linearized_outputs(posterior, args, kwargs, dz, chunk_size).items():
                y = observed[name]
                if etas is None:  # nothing of this site depends on the subnetwork
                    loglik[name] = fn.log_prob(y).expand((num_samples,) + fn.batch_shape)
                    pred[name] = fn.sample((num_samples,))
                else:
                    loglik[name] = spec.log_prob(etas, y)
                    pred[name] = spec.wrap(spec.build(etas)).sample()

    stats = {}
    with torch.no_grad():
        # one model trace per draw serves the prior and the deterministic sites (the network's
        # own values at the draw: they are functions of the latents, not outputs to linearize)
        prior, recorded = _trace_draws(posterior, draws, args, kwargs, log_densities,
                                       deterministic if predictive == "linearized" else ())
        post.update(recorded)
        if log_densities:
            lp = prior
            for name, value in loglik.items():  # masked points are not data (NaN placeholders too)
                lp = lp + torch.where(kept[name], value, 0.0).reshape(num_samples, -1).sum(-1)
            stats = {"lp": lp, "log_q": posterior.get_posterior().log_prob(draws)}

    def numpy(d):
        return {k: v[None].cpu().numpy() for k, v in d.items()}

    attrs = {"predictive": predictive, "subnetwork_size": len(posterior.subnetwork_indices),
             "coordinates": posterior.loc.numel()}
    data = data_groups(numpy(loglik), numpy(pred), {k: v.cpu().numpy() for k, v in observed.items()}, points)
    return pyro_arviz.build({
        "posterior": pyro_arviz.dataset(numpy(post), attrs=attrs),
        "posterior_predictive": data["posterior_predictive"].assign_attrs(attrs),
        CONDITIONAL: data["log_likelihood"].assign_attrs(attrs, leave_one_out=LEAVE_ONE_OUT),
        "sample_stats": pyro_arviz.dataset(numpy(stats), attrs=attrs),
        "observed_data": data["observed_data"],
    }, library="pyro_subnet")


def from_pyro_export(posterior, *args, log_likelihood=True, **kwargs):
    """:func:`pyro_arviz.from_pyro`'s export of a posterior: :func:`to_inference_data`'s. It
    computes ``conditional_log_likelihood`` (``lp`` in ``sample_stats`` sums it) and drops it
    where ``log_likelihood`` is False (``from_pyro`` drops ``posterior_predictive``)."""
    data = to_inference_data(posterior, *args, **kwargs)
    if log_likelihood:
        return data
    groups = datasets(data)
    del groups[CONDITIONAL]
    return pyro_arviz.build(groups, library="pyro_subnet")


def as_arviz_log_likelihood(data):
    """``data`` with its ``conditional_log_likelihood`` as ArviZ's ``log_likelihood`` group, for
    :func:`pyro_subnet.loo` to hand to ArviZ's importance sampling with its own ratios (an
    export of another kind is returned as it is)."""
    groups = datasets(data)
    if CONDITIONAL not in groups:
        return data
    groups["log_likelihood"] = groups.pop(CONDITIONAL)
    return pyro_arviz.build(groups, library="pyro_subnet")


def log_prior(posterior, draws, args, kwargs):
    r"""
    :math:`c_k [\log p_k(T(u)) + \log|\det \partial T_k/\partial u_k|]` summed over the latent
    sites :math:`k` (:math:`c_k` the prior scale of the posterior, 1 for a site it does not scale),
    plus the ``pyro.factor`` terms, at each draw ``u`` of ``draws`` (``[M, D]``): the prior whose
    Hessian at the MAP is the prior part of the subnetwork precision. One model trace per draw.
    """
    return _trace_draws(posterior, draws, args, kwargs)[0]


def _trace_draws(posterior, draws, args, kwargs, prior=True, deterministic=()):
    """:func:`log_prior` at each draw (``None`` without ``prior``) and the values of the
    ``deterministic`` sites, ``{site: [M, ...]}``, from one model trace per draw (none when
    neither is asked for)."""
    latent, scale = posterior._latent, posterior.prior_scale
    out, recorded = [], {name: [] for name in deterministic}
    for u in draws if prior or deterministic else ():
        tr, _ = latent.trace(u, args, kwargs)
        for name in deterministic:
            recorded[name].append(tr.nodes[name]["value"])
        if not prior:
            continue
        total = latent.log_prior(tr, 0.0, prior=False, factors=True)
        for site, uv in latent.guide._unpack_latent(u):
            name = site["name"]
            t = biject_to(site["fn"].support)
            node = tr.nodes[name]
            term = scored_log_prob(node).sum()
            term = term + t.log_abs_det_jacobian(uv, t(uv)).sum()
            total = total + (scale.get(name, 1.0) if isinstance(scale, dict) else scale) * term
        out.append(torch.as_tensor(total, dtype=draws.dtype))
    return (torch.stack(out) if prior else None), {name: torch.stack(v) for name, v in recorded.items()}


# pyro_arviz.from_pyro imports no plugin: it learns here what exports this package's results
pyro_arviz.register(SubnetworkLaplacePosterior, from_pyro_export)
pyro_arviz.register(SubnetworkLaplace, hint="call posterior = guide.laplace_approximation(x, y) after the MAP "
                                            "phase and pass that")

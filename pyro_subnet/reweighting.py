r"""
The importance ratios of leave-one-out for a subnetwork Laplace posterior whose MAP moves
without each point (:mod:`pyro_subnet.jackknife`).

For point :math:`i`, the draws :math:`z_m \sim \mathcal N(0, \Sigma_S)` of the Laplace Gaussian
:math:`q` are mapped linearly onto the Gaussian without the point (:func:`_downdate`, precision
:math:`\Lambda_S - J_{Si}^\top F_i J_{Si}`), :math:`z'_m`, and moved with the MAP:
:math:`u_{im} = \hat u + \Delta_i + z'_m` (``z`` on the S coordinates). The map's Jacobian is
constant per point, so the proposal's density at :math:`u_{im}` is :math:`q(\hat u + z_m)` up to
a constant the normalized weights drop. The target is the model without point :math:`i` with
its coordinates outside S at :math:`\hat u + \Delta_i`, so

.. math::

    \log r_i(m) = \sum_{n \ne i} \log p(y_n \mid \hat\eta_n + J_{Sn} z'_m + J_n \Delta_i)
                  + \log \tilde p(u_{im}) - \log q(\hat u + z_m),

    \widehat{\mathrm{elpd}}_i = \log \frac{\sum_m \tilde r_i(m)\,
        p(y_i \mid \hat\eta_i + J_{Si} z'_m + J_i\Delta_i)}{\sum_m \tilde r_i(m)}

in the linearized model the export describes (:mod:`pyro_subnet.arviz`), :math:`\tilde r`
Pareto-smoothed. The log prior at the moved draws is its traced value at :math:`\hat u + z_m`
(one model trace per draw, as in the export) plus its second-order change over
:math:`a = z'_m - z_m + \Delta_i`, :math:`g^\top a - z_m^\top P a - \tfrac12 a^\top P a` with
:math:`g, P` its gradient and negative Hessian at the MAP: exact for Gaussian priors. Where the
step is exact (a linear-Gaussian model) the moved draws are the leave-one-out posterior's and
every ratio is equal: the estimate is exact up to each predictive integral's Monte Carlo error.
"""

import math

import numpy as np
import torch
import xarray as xr
from scipy.special import logsumexp

import pyro_arviz

from .arviz import log_prior
from .jackknife import _element_log_prob

_FLOAT_BUDGET = 2**24  # floats of the moved parameters per chunk of points
FLAT_RATIOS = 1e-6  # log ratios of one point that span less are equal weights, with k = 0


def coordinate_scales(posterior):
    """The prior scale of each of the D coordinates (1 where a per-site scale names no site)."""
    D = posterior.loc.numel()
    scale = posterior.prior_scale
    s = torch.ones(D, dtype=posterior.loc.dtype, device=posterior.loc.device)
    if isinstance(scale, dict):
        for name, (a, b) in posterior._latent.blocks.items():
            s[a:b] = float(scale.get(name, 1.0))
    else:
        s.fill_(float(scale))
    return s


def _scaled_prior(posterior, shifts):
    """Gradient and negative Hessian of the prior as the export's ``lp`` weighs it (prior scale
    on the prior, none on the factors)."""
    s = coordinate_scales(posterior).to(torch.float64)
    g = s * shifts.grad_prior.to(torch.float64) + shifts.grad_factors.to(torch.float64)
    P, Q = shifts.P.to(torch.float64), shifts.Q.to(torch.float64)
    if shifts.diagonal:
        return g, s * P + Q, True
    r = s.sqrt()
    return g, r[:, None] * P * r[None, :] + Q, False


def site_named(names, var_name, where):
    """The observed site ``var_name`` among ``names``, or the only one; a ``ValueError`` naming them."""
    if var_name is None:
        if len(names) != 1:
            raise ValueError(f"{where} has the observed sites {names}: say which with var_name=")
        return names[0]
    if var_name not in names:
        raise ValueError(f"var_name={var_name!r} is not an observed site of {where} (it has {names})")
    return var_name


def _downdate(posterior, shifts, z):
    r"""
    The draws of the leave-one-out Gaussian from those of :math:`q`: with :math:`U_i = J_{Si}^\top
    L_i` (:math:`F_i = L_i L_i^\top`) the precision without point :math:`i` is
    :math:`\Lambda_S - U_i U_i^\top`, and :math:`z' = z + \Sigma_S U_i C_i U_i^\top z` has its
    covariance when :math:`C_i = f(W_i)`, :math:`W_i = U_i^\top \Sigma_S U_i`,
    :math:`f(w) = ((1 - w)^{-1/2} - 1) / w` (solve :math:`2C + CWC = (I - W)^{-1}` in
    :math:`W`'s eigenbasis). The map is linear, so the proposal's density changes by a constant
    per point, which the normalized weights drop. A point with an eigenvalue :math:`w \ge 1`
    (it alone pins a direction of S) keeps :math:`z' = z`.

    :returns: ``(V, t, Y)``: the move of every element row's parameters is ``V[j, i] @ t[i, m]``
        (``V`` ``[rows, N, r]``, ``t = U_i^T z_m`` ``[N, M, r]``) and ``z' - z = Y[i] @ t[i, m]``
        (``Y`` ``[N, S, r]``).
    """
    dt = torch.float64
    J_S = torch.cat([v[4].reshape(-1, v[4].shape[-1]) for v in shifts.sites.values()])
    B = posterior._whiten(J_S).to(dt)  # B B^T = J_S Sigma_S J_S^T
    spec, y, weight, eta, J_site, row = shifts.sites[shifts.site]
    L = shifts.L.to(dt)  # [N, k, r]
    rows_i = shifts.rows_i
    K_S = B @ B[rows_i].reshape(-1, B.shape[1]).T  # [rows, N k]
    K_S = K_S.reshape(K_S.shape[0], *rows_i.shape)  # [rows, N, k]
    N = rows_i.shape[0]
    K_ii = K_S[rows_i, torch.arange(N, device=rows_i.device)[:, None].expand_as(rows_i)]  # [N, k, k]
    W = L.mT @ K_ii @ L
    w, Q = torch.linalg.eigh(W)
    pinned = (w >= 1 - 1e-9).any(-1)
    w = torch.where(pinned[:, None], torch.zeros_like(w), w)  # their C is zeroed below
    f = torch.where(w.abs() > 1e-8, ((1 - w).rsqrt() - 1) / w.where(w.abs() > 1e-8, torch.ones_like(w)),
                    0.5 + 0.375 * w)
    C = Q @ (f[..., None] * Q.mT)
    C[pinned] = 0
    V = torch.einsum("jnk,nkr,nrq->jnq", K_S, L, C)
    J_pts = J_site.reshape(-1, *J_site.shape[1:])[shifts.points].to(dt)  # [N, k, S]
    t = torch.einsum("nkr,nks,ms->nmr", L, J_pts, z.to(dt))
    if hasattr(posterior, "variance"):  # a diagonal Gaussian: never an S x S matrix
        Sigma_J = (J_pts * posterior.variance.to(dt)).mT  # [N, S, k]
    else:
        Sigma_J = (J_pts @ posterior.covariance.to(dt)).mT
    Y = Sigma_J @ L @ C
    return V, t, Y


@torch.no_grad()
def shifted_ratios(posterior, args, kwargs, shifts, num_samples):
    r"""
    ``(ll, log_ratios, ll_in_sample)``, each ``[points, num_samples]``: the left-out point's
    log density at its moved draws, the log ratios :math:`\log r_i(m)` and its log density at
    the draws themselves (for the lppd of ``p_loo``), from ``num_samples`` draws of ``q``.
    """
    dt = torch.float64
    idx = posterior.subnetwork_indices
    D, M, N = posterior.loc.numel(), num_samples, len(shifts.points)
    z = posterior._offset_draws(M)
    draws = posterior.loc.expand(M, D).index_copy(-1, idx, posterior.loc[idx] + z)
    base = (log_prior(posterior, draws, args, kwargs).to(dt) - posterior.get_posterior().log_prob(draws).to(dt))

    g, P, diagonal = _scaled_prior(posterior, shifts)
    delta = shifts.delta  # [D, N]
    P_delta = P[:, None] * delta if diagonal else P @ delta
    prior_move = g @ delta - 0.5 * (delta * P_delta).sum(0)  # [N]
    cross = z.to(dt) @ P_delta[idx]  # [M, N]: z_m^T P Delta_i
    log_ratios = base[None, :] + (prior_move[:, None] - cross.T)  # [N, M]

    V, t, Y = _downdate(posterior, shifts, z)
    P_S = P[idx] if diagonal else P[idx][:, idx]
    own = torch.empty(N, M, dtype=dt, device=z.device)
    # the draws' own parameters, once: every chunk of points moves them
    etas = {name: eta + torch.einsum("nks,ms->mnk", J_S, z) for name, (_, _, _, eta, J_S, _) in shifts.sites.items()}
    spec, y, weight = shifts.sites[shifts.site][:3]
    in_sample = _element_log_prob(spec, etas[shifts.site], y, weight)[:, shifts.points].T.to(dt)
    per_point = max(1, _FLOAT_BUDGET // max(M * sum(v[3].numel() for v in shifts.sites.values()), 1))
    for a in range(0, N, per_point):
        b = min(N, a + per_point)
        dz = torch.einsum("csr,cmr->cms", Y[a:b], t[a:b])  # z' - z of each draw, for each point
        P_dz = P_S * dz if diagonal else dz @ P_S
        log_ratios[a:b] += (dz @ g[idx] - (z.to(dt) * P_dz).sum(-1) - 0.5 * (dz * P_dz).sum(-1)
                            - (dz * P_delta[idx, a:b].T[:, None, :]).sum(-1))
        for name, (spec, y, weight, eta, _, row) in shifts.sites.items():
            n, k = eta.shape
            moves = shifts.moves[row : row + n * k, a:b].T.reshape(b - a, 1, n, k)
            moves = moves + torch.einsum("jcr,cmr->cmj", V[row : row + n * k, a:b], t[a:b]).reshape(b - a, M, n, k)
            ll = _element_log_prob(spec, etas[name][None] + moves.to(eta.dtype), y, weight).to(dt)  # [c, M, n]
            log_ratios[a:b] += ll.sum(-1)
            if name == shifts.site:
                own[a:b] = ll[torch.arange(b - a), :, shifts.points[a:b]]
    log_ratios -= own
    return own, log_ratios, in_sample


def shifted_loo(posterior, args, kwargs, num_samples, var_name=None, chunk_size=None):
    """PSIS-LOO of ``posterior`` with the MAP moved without each point (module docstring): ArviZ's
    pointwise ELPD data, with ``map_shift`` (the curvature used) and ``step_ratio`` (per point)."""
    from pyro_arviz.masked import KeptPoints

    from .jackknife import map_shifts

    var_name = site_named(posterior._latent.observed, var_name, "the model")
    shifts = map_shifts(posterior, args, kwargs, var_name, chunk_size)
    ll, log_ratios, in_sample = shifted_ratios(posterior, args, kwargs, shifts, num_samples)
    spec, _, weight = shifts.sites[var_name][:3]
    shape = tuple(spec.element_shape)
    kept = KeptPoints(var_name, (weight != 0).reshape(shape).cpu().numpy())
    points = shifts.points.cpu().numpy()

    def array(t, lead=1):
        """Values of the points (``[N]``, or ``[N, M]`` with the draws) on the export's axes."""
        v = t.cpu().numpy()
        full = np.zeros(v.shape[1:] + shape)
        full.reshape(v.shape[1:] + (-1,))[..., points] = v.T if lead else v
        value, dims, coords = kept.select(full, lead)
        out = xr.DataArray(value, dims=("__sample__",) * lead + tuple(dims), coords=coords)
        return out.transpose(..., "__sample__") if lead else out  # ArviZ 0.x smooths along the last axis

    result = elpd_data(array(ll), array(log_ratios), array(in_sample))
    extra = {"map_shift": shifts.curvature}
    for name, value in (("step_ratio", shifts.step_ratio), ("linearization_gap", linearization_gap(
            posterior, args, kwargs, shifts))):
        extra[name] = array(value, lead=0)
    for name, value in extra.items():
        if hasattr(result, "index"):  # ArviZ < 1: a pandas Series
            result[name] = value
        else:
            setattr(result, name, value)
    return result


@torch.no_grad()
def linearization_gap(posterior, args, kwargs, shifts):
    r"""
    ``[points]``: the left-out point's log density under the model itself at its moved MAP
    :math:`\hat u + \Delta_i` minus that under the linearized model the step is taken in
    (one model trace per point). Zero where the natural parameters are linear in the latents
    (a GLM); where they are not, a large sum says that the linearized network's leave-one-out
    is not the network's.
    """
    spec, y, weight, eta, _, row = shifts.sites[shifts.site]
    n, k = eta.shape
    N = len(shifts.points)
    cols = torch.arange(N, device=eta.device)
    moved = eta[shifts.points] + shifts.moves[row : row + n * k].reshape(n, k, N)[shifts.points, :, cols].to(eta)
    gap = torch.empty(N, dtype=torch.float64, device=eta.device)
    for j, i in enumerate(shifts.points.tolist()):
        tr, _ = posterior._latent.trace(posterior.loc + shifts.delta[:, j].to(posterior.loc), args, kwargs)
        network = spec.natural(tr.nodes[shifts.site]["fn"])
        linear = network.clone()
        linear[i] = moved[j]  # the linearized parameters in the same slot: one density call for both
        both = _element_log_prob(spec, torch.stack([network, linear])[:, None], y, weight)[:, 0, i]
        gap[j] = float(both[0] - both[1])
    return gap


def elpd_data(ll, log_ratios, ll_in_sample):
    """
    ArviZ's pointwise ELPD data of the importance-sampled leave-one-out estimate whose integrand
    is ``ll`` and whose log ratios are ``log_ratios`` (DataArrays with the draws in
    ``__sample__``), the ratios Pareto-smoothed, ``p_loo`` against the lppd of ``ll_in_sample``.
    """
    n_samples = ll.sizes["__sample__"]
    # a constant per point changes nothing once normalized; keeping the largest at 0 keeps exp finite
    log_ratios = log_ratios - log_ratios.max("__sample__")
    # equal ratios (draws already from the leave-one-out posterior, as in a linear-Gaussian model)
    # have no tail to fit: ArviZ gives k = inf or fails on them, and on rounding noise any k
    flat = (-log_ratios.min("__sample__")) < FLAT_RATIOS
    ramp = xr.DataArray(np.linspace(-1.0, 0.0, n_samples), dims=("__sample__",))
    log_ratios = log_ratios.where(~flat, ramp)
    if pyro_arviz.arviz_generation() == 0:
        import arviz as az

        log_weights, pareto_k = az.psislw(log_ratios, reff=1.0)
    else:
        import arviz_stats  # noqa: F401  (registers the azstats accessor)

        log_weights, pareto_k = (-log_ratios).azstats.psislw(dim="__sample__")  # it smooths minus its input
    log_weights = log_weights.where(~flat, -math.log(n_samples))
    pareto_k = pareto_k.where(~flat, 0.0)

    def lse(x):
        return xr.apply_ufunc(logsumexp, x, input_core_dims=[["__sample__"]], kwargs={"axis": -1})

    loo_i = lse(log_weights + ll)
    n_points = int(np.prod([s for d, s in ll.sizes.items() if d != "__sample__"]))
    elpd = float(loo_i.sum(skipna=False))
    se = math.sqrt(n_points * float(np.var(loo_i.values)))
    p_loo = float((lse(ll_in_sample) - math.log(n_samples)).sum()) - elpd
    good_k = min(1 - 1 / math.log10(n_samples), 0.7)
    warning = bool((pareto_k > good_k).any())
    if pyro_arviz.arviz_generation() == 0:
        import arviz as az

        return az.ELPDData(
            data=[elpd, se, p_loo, n_samples, n_points, warning, loo_i.rename("loo_i"), pareto_k, "log", good_k,
                  True],
            index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning", "loo_i", "pareto_k",
                   "scale", "good_k", "approx_posterior"],
        )
    from arviz_stats.utils import ELPDDataLOO

    return ELPDDataLOO(elpd=elpd, se=se, p=p_loo, n_samples=n_samples, n_data_points=n_points, scale="log",
                       warning=warning, good_k=good_k, elpd_i=loo_i, pareto_k=pareto_k, approx_posterior=True)

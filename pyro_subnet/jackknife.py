r"""
Where the MAP would be without each data point: one Newton step, in the linearized model.

A subnetwork Laplace posterior keeps every coordinate outside S at the MAP :math:`\hat u`, which
was fitted with every point, so reweighting its draws (:mod:`pyro_subnet.cross_validation`)
leaves point :math:`i` out of the S coordinates only. With :math:`\eta_n` the natural parameters
of data element :math:`n`, :math:`J_n` their Jacobian w.r.t. all D coordinates at the MAP,
:math:`r_n = \nabla_\eta \log p(y_n \mid \hat\eta_n)`, :math:`F_n` their Fisher and
:math:`H = \sum_n J_n^\top F_n J_n + P` (the GGN of the MAP's objective, :math:`P` the Hessian
of its negative log prior and factors), the Newton step from :math:`\hat u` on the objective
without point :math:`i` is

.. math::

    \Delta_i = -(H - J_i^\top F_i J_i)^{-1} J_i^\top r_i
             = -H^{-1} J_i^\top (I - F_i B_i)^{-1} r_i, \qquad B_i = J_i H^{-1} J_i^\top

(Woodbury), the approximate leave-one-out of [2, 3]; :math:`-H^{-1} J_i^\top r_i` alone is the
infinitesimal jackknife [1]. The step is exact where that objective is quadratic (a
linear-Gaussian model). Its length is then set by a line search on the linearized objective
without the point (:func:`_step_length`): 1 where that objective is quadratic, shorter where
the other points' curvature grows as the MAP moves (a fit that separates the data). Everything
goes through :math:`K = J H^{-1} J^\top` (elements by
elements): element :math:`j`'s parameters move by :math:`J_j \Delta_i`, a column of :math:`K`.
:math:`H` is the full ``D x D`` GGN up to :data:`FULL_MAX_DIM` coordinates and its diagonal
above (:attr:`Shifts.curvature` says which).

How far to trust a step: after it, the objective without point :math:`i` (linearized model,
quadratic prior) still has a gradient :math:`e_i`, whose Newton step :math:`H_{-i}^{-1} e_i`
is compared with :math:`\Delta_i` in the metric :math:`H_{-i} = H - J_i^\top F_i J_i`: the ratio
:math:`\rho_i` (:attr:`Shifts.step_ratio`) is 0 for a quadratic objective and near 1 or above
where one step does not say where the MAP goes; it is infinite where :math:`I - F_i B_i` is not
positive (point :math:`i` alone pins a direction).

**References**

[1] R. Giordano, W. Stephenson, R. Liu, M. Jordan, T. Broderick, "A Swiss army infinitesimal
    jackknife", AISTATS 2019.
[2] K. R. Rad, A. Maleki, "A scalable estimate of the out-of-sample prediction error via
    approximate leave-one-out cross-validation", JRSS B 82(4), 2020.
[3] S. Wang, W. Zhou, H. Lu, A. Maleki, V. Mirrokni, "Approximate leave-one-out for fast
    parameter tuning in high dimensions", ICML 2018.
"""

import torch

from . import curvature, predictive, prior
from .likelihoods import unwrap

FULL_MAX_DIM = 4096  # the full GGN up to this D (a D x D Cholesky), its diagonal above
_FLOAT_BUDGET = 2**27  # floats of the element-by-coordinate Jacobian this module may hold


class Shifts:
    r"""
    The leave-one-out MAP shifts of one observed site's points, and what they need.

    :ivar str site: the site whose points are left out.
    :ivar torch.Tensor points: the indices (flat, within the site) of the points left out: the
        elements with a nonzero weight (a ``poutine.mask``\ ed element is no data).
    :ivar dict sites: ``{name: (spec, y, weight, eta, J_S, row)}`` for every observed site:
        MAP natural parameters ``[n, k]``, their Jacobian on the S coordinates ``[n, k, S]`` and
        the site's first row in :math:`K`.
    :ivar torch.Tensor moves: ``[rows, points]``, :math:`J_j \Delta_i` for every element row.
    :ivar torch.Tensor delta: ``[D, points]``, the steps :math:`\Delta_i`.
    :ivar torch.Tensor step_ratio: ``[points]``, :math:`\rho_i` (module docstring).
    :ivar torch.Tensor step_length: ``[points]``, the line search's :math:`t_i` (already in
        ``moves`` and ``delta``).
    :ivar str curvature: ``"full GGN"`` or ``"diagonal GGN"``.

    and, for the draws and the prior terms of :mod:`pyro_subnet.reweighting`: ``K``, each point's
    ``M = I - F B``, ``F``, ``B``, ``r``, ``L`` and element rows ``rows_i``; the prior's gradients
    ``grad_prior``, ``grad_factors`` and negative Hessians ``P``, ``Q`` (``diagonal`` says which form).
    """


def _elements(posterior, args, kwargs, chunk_size):
    """Per observed site: spec, observed value, element weights, MAP parameters, all-D Jacobian,
    Fisher square root and the gradient of the site's log density w.r.t. its parameters."""
    latent, u_hat = posterior._latent, posterior.loc.detach()
    D = u_hat.numel()
    everything = torch.arange(D, device=u_hat.device)
    out = predictive.linearize(posterior, args, kwargs, lambda spec, J: J, chunk_size, idx=everything)
    with torch.no_grad():
        tr, _ = latent.trace(u_hat, args, kwargs)
    sites = {}
    for name, (spec, fn, eta, J) in out.items():
        if eta is None:
            continue  # a site that does not depend on the latents moves with no step
        node = tr.nodes[name]
        weight = curvature._site_weight(node, spec).to(u_hat)
        L = spec.fisher_sqrt(node["fn"]) * weight.sqrt()[:, None, None]  # a dist.mask() is in fisher_sqrt
        inner = unwrap(node["fn"])[3]
        if inner is not None:  # ... and must be in the log densities too
            weight = weight * inner.to(u_hat).expand(spec.element_shape).reshape(-1)
        y = _placeholders_filled(node["value"], weight)
        e = eta.clone().requires_grad_(True)
        with torch.enable_grad():
            ll = (_element_log_prob(spec, e, y, weight)).sum()
            (r,) = torch.autograd.grad(ll, e)
        sites[name] = (spec, y, weight, eta, J, L.detach(), r)
    return sites


def _placeholders_filled(y, weight):
    """``y`` with its masked elements (weight 0) set to a kept value: a masked NaN placeholder
    would make its zero-weighted log density NaN, and every sum it enters."""
    kept = weight != 0
    if bool(kept.all()) or not bool(kept.any()) or y.numel() % kept.numel():
        return y
    flat = y.reshape(kept.numel(), -1)
    fill = flat[kept][0]
    return torch.where(kept[:, None], flat, fill).reshape(y.shape)


def _element_log_prob(spec, eta, y, weight):
    """``[..., n]``: each element's weighted log density under parameters ``eta`` ``[..., n, k]``."""
    lp = spec.build(eta).log_prob(y)
    lp = lp.reshape(lp.shape[: eta.dim() - 2] + (-1,))
    return lp * weight


def _prior_terms(posterior, args, kwargs, diagonal):
    r"""``(grad_prior, grad_factors, P, Q)`` at the MAP: the gradients of the unscaled log prior
    (with log|det J|) and of the factors, and their negative Hessians (full, or diagonals)."""
    latent, u_hat = posterior._latent, posterior.loc.detach()
    D = u_hat.numel()
    everything = torch.arange(D, device=u_hat.device)
    batches = [(args, kwargs)]
    grads = []
    for with_prior in (True, False):  # plain gradients: a term linear in u has one too
        x = u_hat.clone().requires_grad_(True)
        with torch.enable_grad():
            tr, logdet = latent.trace(u_hat, args, kwargs, everything, x)
            lp = latent.log_prior(tr, logdet, prior=with_prior, factors=not with_prior)
            moves = torch.is_tensor(lp) and lp.requires_grad
            grad = torch.autograd.grad(lp, x, allow_unused=True)[0] if moves else None
        grads.append(u_hat.new_zeros(D) if grad is None else grad.detach())
    grad_prior, grad_factors = grads
    if diagonal:
        Q = prior.prior_hessian_diagonal(latent, u_hat, batches, scale=0.0)
        P = prior.prior_hessian_diagonal(latent, u_hat, batches, scale=1.0) - Q
    else:
        Q = u_hat.new_zeros(D, D)
        P = prior.prior_hessian(latent, u_hat, everything, batches, factors_out=Q)
    return grad_prior, grad_factors, P, Q


def map_shifts(posterior, args, kwargs, site, chunk_size=None):
    """The :class:`Shifts` of the points of observed ``site`` on the model call ``(args, kwargs)``."""
    u_hat = posterior.loc.detach()
    D = u_hat.numel()
    diagonal = D > FULL_MAX_DIM
    sites = _elements(posterior, args, kwargs, chunk_size)
    if site not in sites:
        raise ValueError(f"observed site '{site}' does not depend on the latent coordinates: leaving its "
                         "points out moves nothing")
    rows = sum(v[3].numel() for v in sites.values())
    if rows * max(D, rows) > _FLOAT_BUDGET:
        raise MemoryError(f"the leave-one-out shifts need the Jacobian of {rows} outputs in {D} coordinates and "
                          f"their {rows} x {rows} products ({rows * max(D, rows):.2g} floats, above "
                          f"{_FLOAT_BUDGET:.2g})")
    grad_prior, grad_factors, P, Q = _prior_terms(posterior, args, kwargs, diagonal)
    dt = torch.float64
    J = torch.cat([v[4].reshape(-1, D) for v in sites.values()]).to(dt)  # [rows, D]
    G = torch.cat([(v[5].mT @ v[4]).reshape(-1, D) for v in sites.values()]).to(dt)  # L^T J rows
    if diagonal:
        h = G.pow(2).sum(0) + (P + Q).to(dt)
        if (h <= 0).any():
            raise ValueError("the diagonal of the MAP's curvature is not positive in every coordinate")
        W = J.T / h.sqrt()[:, None]  # [D, rows]: K = W^T W

        def solve(v):  # H^{-1} v
            return v / h[:, None]
    else:
        H = G.T @ G + (P + Q).to(dt)
        chol, info = torch.linalg.cholesky_ex(H)
        if info != 0:
            raise ValueError("the MAP's curvature over all coordinates is not positive definite")
        W = torch.linalg.solve_triangular(chol, J.T, upper=False)

        def solve(v):
            return torch.cholesky_solve(v, chol)
    K = W.T @ W

    spec, y, weight, eta, J_site, L, r = sites[site]
    if spec.reinterpreted:
        raise ValueError(f"observed site '{site}' has event dims: its points are not its elements")
    start = 0
    for name in sites:
        if name == site:
            break
        start += sites[name][3].numel()
    n, k = eta.shape
    points = (weight != 0).nonzero().reshape(-1)
    N = len(points)
    rows_i = start + points[:, None] * k + torch.arange(k, device=points.device)  # [N, k]
    B = K[rows_i[:, :, None], rows_i[:, None, :]]  # [N, k, k]
    F = (L @ L.mT)[points].to(dt)
    M = torch.eye(k, dtype=dt, device=B.device) - F @ B
    c = torch.linalg.solve(M, r[points].to(dt).unsqueeze(-1)).squeeze(-1)  # [N, k]
    pinned = torch.linalg.eigvals(M).real.min(-1).values <= 1e-6
    C = K.new_zeros(K.shape[0], N)
    C[rows_i, torch.arange(N, device=C.device)[:, None].expand(N, k)] = c
    moves = -K @ C  # [rows, N]: J_j Delta_i
    delta = -solve(J.T @ C)  # [D, N]
    t = _step_length(sites, site, points, moves, delta, (P + Q).to(dt), diagonal)
    moves, delta = moves * t, delta * t

    out = Shifts()
    out.site, out.points, out.curvature = site, points, "diagonal GGN" if diagonal else "full GGN"
    out.moves, out.delta, out.K, out.M, out.F, out.B, out.r = moves, delta, K, M, F, B, r[points].to(dt)
    out.rows_i, out.L, out.step_length = rows_i, L[points], t
    out.grad_prior, out.grad_factors, out.P, out.Q, out.diagonal = grad_prior, grad_factors, P, Q, diagonal
    out.sites, pos = {}, 0
    idx = posterior.subnetwork_indices
    for name, (spec_j, y_j, w_j, eta_j, J_j, _, _) in sites.items():
        out.sites[name] = (spec_j, y_j, w_j, eta_j, J_j[..., idx], pos)
        pos += eta_j.numel()
    out.step_ratio = _step_ratio(out, sites)
    out.step_ratio[pinned] = float("inf")
    return out


def _step_length(sites, site, points, moves, delta, P, diagonal, iterations=8):
    r"""
    The length :math:`t_i` along each Newton step that maximizes the linearized objective without
    point :math:`i`, with the MAP taken as stationary (as the step does) and the prior quadratic:

    .. math::

        \phi_i(t) = \sum_{j \ne i} \log p(y_j \mid \hat\eta_j + t J_j\Delta_i)
                    - t \sum_j r_j^\top J_j \Delta_i - \tfrac{t^2}{2} \Delta_i^\top P \Delta_i .

    :math:`t = 1` where that objective is quadratic (a linear-Gaussian model). Where the fit
    separates the data, the other points' curvature grows as the MAP moves and one Newton step
    from the MAP's curvature overshoots: :math:`t < 1`. The log densities are concave in the
    natural parameters of the families here, so :math:`\phi_i` is concave and a few Newton
    iterations on :math:`t` (kept in [0.05, 2]) find its maximum.
    """
    dt = torch.float64
    N = moves.shape[1]
    prior = (delta * (P[:, None] * delta if diagonal else P @ delta)).sum(0)
    t = torch.ones(N, dtype=dt, device=moves.device)
    pos = 0
    terms = []
    for name, (spec, y, weight, eta, _, _, r) in sites.items():
        n, k = eta.shape
        m = moves[pos : pos + n * k].T.reshape(N, n, k)
        others = torch.ones(N, n, dtype=dt, device=m.device)
        if name == site:
            others[torch.arange(N, device=m.device), points] = 0
        terms.append((spec, y, weight.to(dt), eta.to(dt), m, others, (r.to(dt) * m).sum((-1, -2))))
        pos += n * k
    for _ in range(iterations):
        x = t.clone().requires_grad_(True)
        with torch.enable_grad():
            phi = -0.5 * x**2 * prior
            for spec, y, weight, eta, m, others, linear in terms:
                ll = _element_log_prob(spec, eta + x[:, None, None] * m, y, weight)
                phi = phi + (ll * others).sum(-1) - x * linear
            (d1,) = torch.autograd.grad(phi.sum(), x, create_graph=True)
            (d2,) = torch.autograd.grad(d1.sum(), x)
        d1 = d1.detach()
        step = torch.where(d2 < 0, -d1 / d2.clamp(max=-1e-300), 0.5 * d1.sign())
        t = (t + step).clamp(0.05, 2.0)
    return torch.where(torch.isfinite(t), t, torch.ones_like(t))


def _step_ratio(shifts, sites):
    r""":math:`\rho_i`: the next Newton step's length over the first's, both in the metric
    :math:`H_{-i}` (module docstring), from the gradient the linearized model is left with."""
    dt = torch.float64
    N = len(shifts.points)
    v = []  # rows x points: grad l_j(eta_j + move) - grad l_j(eta_j) + F_j move, 0 at point i's rows
    for name, (spec, y, weight, eta, _, L, r) in sites.items():
        n, k = eta.shape
        a = shifts.sites[name][5]
        move = shifts.moves[a : a + n * k].T.reshape(N, n, k)
        e = (eta.to(dt) + move).to(eta.dtype).requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(_element_log_prob(spec, e, y, weight).sum(), e)
        F = (L @ L.mT).to(dt)
        v.append((g.to(dt) - r.to(dt) + (F @ move.unsqueeze(-1)).squeeze(-1)).reshape(N, n * k))
    v = torch.cat(v, 1).T  # [rows, N]
    cols = torch.arange(N, device=v.device)[:, None].expand_as(shifts.rows_i)
    v[shifts.rows_i, cols] = 0
    Kv = shifts.K @ v  # [rows, N]
    Kiv = Kv[shifts.rows_i, cols]  # [N, k]: J_i H^{-1} e_i
    Minv_F = torch.linalg.solve(shifts.M, shifts.F)
    second = (v * Kv).sum(0) + (Kiv * (Minv_F @ Kiv.unsqueeze(-1)).squeeze(-1)).sum(-1)
    Br = (shifts.B @ shifts.r.unsqueeze(-1)).squeeze(-1)
    first = (shifts.r * Br).sum(-1) + (Br * (Minv_F @ Br.unsqueeze(-1)).squeeze(-1)).sum(-1)
    # the step taken was t Delta: the gradient left is e + (1 - t) H_-i Delta, so the next step is
    # H_-i^-1 e + (1 - t) Delta, measured against the t Delta taken (Delta^T e = sum_j m_j^T v_j)
    t = shifts.step_length
    cross = (shifts.moves / t * v).sum(0)
    nxt = second + 2 * (1 - t) * cross + (1 - t) ** 2 * first
    return (nxt.clamp(min=0) / (t**2 * first).clamp(min=1e-300)).sqrt()

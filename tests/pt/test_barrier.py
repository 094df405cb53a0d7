"""The local barrier from the rungs' own log-likelihood draws against its closed form.

Model: theta ~ N(0, s0^2), y_j ~ N(theta, sigma^2), j = 1..n. At inverse temperature beta the
tempered posterior is N(m, v) with 1/v = 1/s0^2 + beta n / sigma^2, m = v beta n ybar / sigma^2,
and ll(theta) = const - a (theta - ybar)^2 with a = n / (2 sigma^2). For independent X, X',
ll(X) - ll(X') = -a (U - U')(U + U'), U = X - ybar, where U - U' ~ N(0, 2v) and
U + U' ~ N(2 mu, 2v), mu = m - ybar, are independent, so
lambda(beta) = a E|U - U'| E|U + U'| / 2 in closed form (folded normal means).
"""

import math

import pytest
import torch

from pyro_pt.barrier import SATURATED, autocorrelation_time, integrated_barrier, local_barrier, pair_barriers

S0, SIGMA = 1.0, 1.0


def posterior(beta, n, ybar):
    v = 1.0 / (1.0 / S0**2 + beta * n / SIGMA**2)
    return v * beta * n * ybar / SIGMA**2, v


def exact_lambda(beta, n, ybar):
    m, v = posterior(beta, n, ybar)
    a, mu, tau = n / (2 * SIGMA**2), m - ybar, math.sqrt(2 * v)
    folded_zero = tau * math.sqrt(2 / math.pi)
    M = 2 * mu
    folded = tau * math.sqrt(2 / math.pi) * math.exp(-M**2 / (2 * tau**2)) + M * math.erf(M / (tau * math.sqrt(2)))
    return 0.5 * a * folded_zero * folded


def exact_increment(beta_hot, beta_cold, n, ybar, steps=4001):
    """Quadrature of the closed-form lambda in u = log(posterior precision), where it is smooth."""
    lo, hi = (math.log(1 / S0**2 + b * n / SIGMA**2) for b in (beta_hot, beta_cold))
    u = torch.linspace(lo, hi, steps, dtype=torch.float64)
    beta = (u.exp() - 1 / S0**2) * SIGMA**2 / n
    values = torch.tensor([exact_lambda(max(float(b), 0.0), n, ybar) for b in beta], dtype=torch.float64)
    return float(torch.trapezoid(values * u.exp() * SIGMA**2 / n, u))


def ll_draws(beta, n, ybar, num, rho=0.0, seed=0):
    """ll of an exact AR(1) chain (stationary law pi_beta, lag-one correlation rho)."""
    g = torch.Generator().manual_seed(seed)
    m, v = posterior(beta, n, ybar)
    eps = torch.randn(num, generator=g, dtype=torch.float64)
    theta = torch.empty(num, dtype=torch.float64)
    theta[0] = eps[0]
    for t in range(1, num):
        theta[t] = rho * theta[t - 1] + math.sqrt(1 - rho**2) * eps[t]
    theta = m + math.sqrt(v) * theta
    return -(n / (2 * SIGMA**2)) * (theta - ybar) ** 2, theta


def acceptance(beta_hot, beta_cold, n, ybar, num=20000):
    ll_c, _ = ll_draws(beta_cold, n, ybar, num, seed=1)
    ll_h, _ = ll_draws(beta_hot, n, ybar, num, seed=2)
    return float(torch.clamp(torch.exp((beta_cold - beta_hot) * (ll_h - ll_c)), max=1).mean())


@pytest.mark.parametrize("beta,n,ybar", [(1.0, 50, 0.3), (0.05, 50, 0.3), (0.0, 50, 0.3), (1.0, 2000, 0.0)])
@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_local_barrier_matches_the_closed_form(beta, n, ybar, rho):
    ll, _ = ll_draws(beta, n, ybar, 6000, rho=rho)
    exact = exact_lambda(beta, n, ybar)
    assert local_barrier(ll) == pytest.approx(exact, rel=0.1)


def test_pairs_closer_than_the_autocorrelation_time_are_left_out():
    # Each value repeated 20 times: pairs inside a block are not independent draws.
    ll, _ = ll_draws(1.0, 50, 0.3, 20)
    sticky = ll.repeat_interleave(20)
    lag = math.ceil(autocorrelation_time(sticky))
    assert lag >= 10
    s, t = torch.meshgrid(torch.arange(400), torch.arange(400), indexing="ij")
    far = (t - s) >= lag
    diff = (sticky[:, None] - sticky[None]).abs()
    assert local_barrier(sticky) == pytest.approx(0.5 * float(diff[far].mean()), rel=1e-12)
    all_pairs = 0.5 * float(diff[t > s].mean())
    assert all_pairs < 0.97 * local_barrier(sticky)


def test_integration_is_exact_for_the_gaussian_form():
    # lambda = c / (b + beta): the integral from two end values equals c log((b + b1) / (b + b0))
    c, b = 2.0, 0.01
    for b0, b1 in ((0.0, 0.3), (0.001, 1.0), (0.5, 0.6)):
        got = integrated_barrier(b0, b1, c / (b + b0), c / (b + b1))
        assert got == pytest.approx(c * math.log((b + b1) / (b + b0)), rel=1e-12)
    assert integrated_barrier(0.2, 0.4, 1.0, 3.0) == pytest.approx(0.2 * 2.0)  # increasing: trapezoid


@pytest.mark.parametrize("ladder", [[1.0, 0.0], [1.0, 0.001, 0.0], [1.0, 0.3, 0.1]])
def test_pair_barriers_do_not_saturate(ladder):
    n, ybar = 10**6, 0.001
    lambdas = [local_barrier(ll_draws(b, n, ybar, 4000, rho=0.5, seed=i)[0]) for i, b in enumerate(ladder)]
    rejection = [1 - acceptance(bh, bc, n, ybar) for bc, bh in zip(ladder, ladder[1:])]
    got = pair_barriers(ladder, rejection, lambdas)
    for i, (bc, bh) in enumerate(zip(ladder, ladder[1:])):
        exact = exact_increment(bh, bc, n, ybar)
        if rejection[i] > 0.99:
            assert exact > 2 * rejection[i]  # the rejection rate alone would be far too low
        if rejection[i] > SATURATED:
            assert got[i] == pytest.approx(exact, rel=0.1), (i, rejection[i], exact)
        else:
            assert got[i] == rejection[i]
    if ladder == [1.0, 0.0]:
        assert rejection[0] > 0.99


def test_unknown_inputs():
    assert math.isnan(local_barrier(torch.tensor([1.0])))
    assert math.isnan(local_barrier(torch.tensor([1.0, float("nan"), 2.0])))
    assert pair_barriers([1.0, 0.5], [math.nan], [1.0, 2.0]) == [integrated_barrier(0.5, 1.0, 2.0, 1.0)]
    assert math.isnan(pair_barriers([1.0, 0.5], [math.nan], [math.nan, 2.0])[0])


@pytest.mark.parametrize("n", [4, 5, 101, 2000])
@pytest.mark.parametrize("rho", [0.0, 0.6, 0.97])
def test_the_autocorrelation_time_is_pyros_effective_sample_size_of_one_chain(n, rho):
    """The O(n) running minimum gives Pyro's own n / ESS (whose n x n matrix it replaces)."""
    from pyro.ops.stats import effective_sample_size

    generator = torch.Generator().manual_seed(n)
    noise = torch.randn(n, generator=generator, dtype=torch.float64)
    x = torch.zeros(n, dtype=torch.float64)
    for i in range(n):
        x[i] = (rho * x[i - 1] if i else 0.0) + noise[i]
    ess = float(effective_sample_size(x[None, :, None], chain_dim=0, sample_dim=1))
    assert autocorrelation_time(x) == pytest.approx(max(1.0, n / ess), rel=1e-12)

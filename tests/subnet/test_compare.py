"""az.compare on the README's three results (a NUTS run, a ParallelTempering run and a subnet
Laplace posterior) ranks them as leave-one-out refits do, on a linear regression small enough to
refit per point in closed form: the exact posterior without each point for the samplers, and for
the subnet posterior the MAP over all three weights without the point with the Laplace Gaussian
on its one subnetwork weight. On these data the subnet posterior's leave-one-out is over a nat
below the exact one, while its export's pointwise log-likelihood, read by az.loo as posterior
draws, would put it about two nats ahead: the export has no log_likelihood group, so that az.loo and
az.compare refuse it, and pyro_subnet.loo's result takes its place. Every expected number is
computed here."""

import warnings

import arviz as az
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import pyro_arviz
import pyro_subnet
from pyro_pt import ParallelTempering
from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace
from pyro_subnet.arviz import CONDITIONAL, as_arviz_log_likelihood
from tests.arviz import generation

pytestmark = pytest.mark.slow  # a NUTS and a PT run: 100 s on a loaded 2-core machine

NOISE = 0.5
N, DRAWS = 40, 400
TRUE_W = torch.tensor([0.8, -0.5, 0.3])


def model(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(3, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ w, NOISE), obs=y)


def data():
    g = torch.Generator().manual_seed(18)  # data on which one subnetwork weight predicts clearly worse
    x = torch.randn(N, 3, generator=g, dtype=torch.float64)
    return x, x @ TRUE_W.to(x) + NOISE * torch.randn(N, generator=g, dtype=x.dtype)


def fit(x, y):
    """The exact posterior's mean and precision (the MAP and the full Laplace precision)."""
    x, y = x.double(), y.double()
    precision = x.T @ x / NOISE**2 + torch.eye(3, dtype=x.dtype)
    return torch.linalg.solve(precision, x.T @ y / NOISE**2), precision


def refit_loo(x, y, subnetwork=None):
    r"""
    :math:`\sum_i \log p(y_i \mid y_{-i})`, refitting without each point: the exact posterior
    (``subnetwork=None``), or the subnet posterior fitted without the point (the MAP of all three
    weights; a Gaussian on the ``subnetwork`` weights with their block of the precision, the
    others at the MAP), each predicting :math:`y_i` in closed form.
    """
    total = 0.0
    for i in range(len(y)):
        keep = torch.arange(len(y)) != i
        mean, precision = fit(x[keep], y[keep])
        xi = x[i].double()
        if subnetwork is None:
            var = xi @ torch.linalg.solve(precision, xi)
        else:
            s = subnetwork
            var = xi[s] @ torch.linalg.solve(precision[s][:, s], xi[s])
        total += float(torch.distributions.Normal(xi @ mean, (var + NOISE**2).sqrt()).log_prob(y[i].double()))
    return total


@pytest.fixture(scope="module")
def runs():
    x, y = data()
    pyro.set_rng_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the short runs' tempering and step-size warnings
        nuts = MCMC(NUTS(model), DRAWS, 200, disable_progbar=True)
        nuts.run(x, y)
        pt = MCMC(ParallelTempering(model, num_replicas=2, max_temperature=4.0, adapt_temperatures=False),
                  DRAWS, 200, disable_progbar=True)
        pt.run(x, y)
    pyro.clear_param_store()
    guide = SubnetworkLaplace(model, subnetwork_size=1)  # the default selection picks one of the three
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(fit(x, y)[0])  # the exact MAP (the MAP phase is not under test)
    return {"nuts": nuts, "pt": pt, "subnet": guide.laplace_approximation(x, y)}


def test_the_subnet_export_is_refused_by_az_loo_and_az_compare(runs):
    x, y = data()
    export = pyro_arviz.from_pyro(runs["subnet"], x, y, num_samples=DRAWS)
    assert "log_likelihood" not in pyro_arviz.groups_of(export)
    assert "pyro_subnet.loo(posterior, *model_args)" in export[CONDITIONAL].attrs["leave_one_out"]
    with pytest.raises((TypeError, KeyError, ValueError)):
        az.loo(export)
    with pytest.raises((TypeError, KeyError, ValueError)):
        generation.compare({"nuts": pyro_arviz.from_pyro(runs["nuts"]), "subnet": export})
    # what az.loo would have said: the draws' own PSIS-LOO leaves points out of the subnetwork
    # weight only, far above the refits; pyro_subnet.loo(export), without the model, warns so
    subnet = refit_loo(x, y, runs["subnet"].subnetwork_indices.tolist())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        naive = generation.elpd(az.loo(as_arviz_log_likelihood(export)))
    assert naive - refit_loo(x, y) > 1.0  # ahead of the exact posterior's refits, not behind
    with pytest.warns(SubnetLOOWarning, match="the MAP is not moved without each point"):
        pyro_subnet.loo(export)


def test_compare_ranks_the_readme_results_as_refits_do(runs):
    x, y = data()
    exact = refit_loo(x, y)
    subnet = refit_loo(x, y, runs["subnet"].subnetwork_indices.tolist())
    assert exact - subnet > 1.0  # the data this test is about: the refits rank the subnet posterior last
    pyro.set_rng_seed(1)
    results = {"nuts": pyro_arviz.from_pyro(runs["nuts"]), "pt": pyro_arviz.from_pyro(runs["pt"]),
               "subnet": pyro_subnet.loo(runs["subnet"], x, y, num_samples=2000)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto k warnings of a few hundred draws
        table = generation.compare(results)
    elpd = generation.compare_columns()[0]
    assert list(table.index)[-1] == "subnet"
    for name in ("nuts", "pt"):  # PSIS-LOO of 400 correlated draws of the exact posterior: a few tenths off
        assert float(table.loc[name, elpd]) == pytest.approx(exact, abs=0.6), name
    # the linear-Gaussian case: the MAP's one Newton step without each point is the refit's MAP
    assert float(table.loc["subnet", elpd]) == pytest.approx(subnet, abs=0.1)

"""pyro_subnet.loo with the MAP moved without each point, on what it is given: an export, which
holds no model to move the MAP with, masked points, which are no data, and a site over two
plates, whose pointwise results keep the export's axes."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_arviz
from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, loo
from subnet_models import SIGMA, linreg, linreg_posterior
from tests.arviz.generation import elpd_parts

pytest.importorskip("arviz")


def test_an_unmoved_estimate_warns():
    """An export holds no model to move the MAP with: with coordinates outside S its estimate is
    optimistic and says so; with S = D there is nothing to move and nothing to say."""
    from pyro_subnet import to_inference_data

    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 3, generator=g)
    y = x @ torch.tensor([1.0, -0.5, 0.3]) + SIGMA * torch.randn(20, generator=g)
    for size, warns in ((1, True), (3, False)):
        guide = SubnetworkLaplace(linreg, subnetwork_size=size, selection=torch.arange(size))
        guide(x, y)
        with torch.no_grad():
            guide.loc.copy_(linreg_posterior(x, y)[0])
        idata = to_inference_data(guide.laplace_approximation(x, y), x, y, num_samples=200)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loo(idata)
        moved = [w for w in caught if issubclass(w.category, SubnetLOOWarning) and "not moved" in str(w.message)]
        assert bool(moved) == warns, [str(w.message) for w in caught]


def _masked_linreg(how):
    def model(x, y=None, mask=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        with pyro.plate("data", x.shape[0]):
            if how == "poutine":
                with pyro.poutine.mask(mask=mask):
                    pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)
            else:
                pyro.sample("obs", dist.Normal(x @ w, SIGMA).mask(mask), obs=y)

    return model


@pytest.mark.parametrize("how", ["poutine", "dist"])
def test_masked_points_are_no_data(how):
    """A masked point is neither left out nor part of any step: the estimate is the one of the
    model fitted on the kept points alone, and its points carry their original positions."""
    n, p = 30, 4
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=g)
    y = x @ torch.randn(p, generator=g) + SIGMA * torch.randn(n, generator=g)
    mask = torch.ones(n, dtype=torch.bool)
    mask[::5] = False

    def posterior(model, *args):
        guide = SubnetworkLaplace(model, subnetwork_size=2, selection=torch.tensor([0, 3]))
        guide(*args)
        with torch.no_grad():
            guide.loc.copy_(linreg_posterior(x[mask], y[mask])[0])
        return guide.laplace_approximation(*args)

    pyro.set_rng_seed(0)
    masked = loo(posterior(_masked_linreg(how), x, y, mask), x, y, mask, num_samples=300)
    pyro.set_rng_seed(0)
    kept = loo(posterior(linreg, x[mask], y[mask]), x[mask], y[mask], num_samples=300)
    elpd, _, elpd_i = elpd_parts(masked)
    assert len(elpd_i) == int(mask.sum())
    assert abs(elpd - elpd_parts(kept)[0]) < 1e-8
    points = (masked["loo_i"] if pyro_arviz.arviz_generation() == 0 else masked.elpd_i).coords["obs_dim_0"].values
    assert list(points) == mask.nonzero().reshape(-1).tolist()


def test_points_of_a_two_dimensional_site_keep_the_exports_axes():
    """A site over two plates: the pointwise results have the export's two axes, not a flat one."""
    from pyro_subnet import to_inference_data

    def grid(x, y=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        with pyro.plate("a", 2, dim=-1), pyro.plate("b", x.shape[0], dim=-2):
            pyro.sample("obs", dist.Normal((x @ w)[:, None] + torch.tensor([0.0, 1.0]), SIGMA), obs=y)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 3, generator=g)
    y = (x @ torch.tensor([1.0, -1.0, 0.5]))[:, None] + torch.tensor([0.0, 1.0])
    y = y + SIGMA * torch.randn(10, 2, generator=g)
    guide = SubnetworkLaplace(grid, subnetwork_size=1, selection=torch.tensor([0]))
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([1.0, -1.0, 0.5]))
    post = guide.laplace_approximation(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubnetLOOWarning)
        result = loo(post, x, y, num_samples=300)
    pointwise = result["loo_i"] if pyro_arviz.arviz_generation() == 0 else result.elpd_i
    exported = to_inference_data(post, x, y, num_samples=10)["conditional_log_likelihood"]["obs"]
    assert pointwise.dims == exported.dims[2:] and pointwise.shape == exported.shape[2:]
    assert "map_shift" in (result.index if pyro_arviz.arviz_generation() == 0 else dir(result))

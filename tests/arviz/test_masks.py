"""Masked observations, pyro.factor and pyro.deterministic sites in the groups of the model traced at
given draws (pyro_arviz.pointwise_log_likelihood: no sampler, so each case is exact and fast), and
the kept points' positions through dims=/coords= and netCDF. Runs in both ArviZ suites."""

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch

import pyro_arviz
from pyro_arviz.convert import label
from pyro_arviz.sites import kept_points

NOISE = 0.5


def draws(chains=2, num=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(chains, num, 2, generator=g, dtype=torch.float64)}


def line(x, y, mask):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]), poutine.mask(mask=mask):
        pyro.sample("y", dist.Normal(w[0] * x + w[1], NOISE), obs=y)


def grid(x, y, mask):
    """Rows x columns of observations (two plates), one mask over both."""
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("cols", y.shape[1], dim=-1), pyro.plate("rows", y.shape[0], dim=-2):
        with poutine.mask(mask=mask):
            pyro.sample("y", dist.Normal(w[0] * x[:, None] + w[1], NOISE), obs=y)


def expected_grid(samples, x, y):
    w = samples["w"][..., None, None, :]
    return torch.distributions.Normal(w[..., 0] * x[:, None] + w[..., 1], NOISE).log_prob(y)


def grid_data(rows=4, cols=3):
    g = torch.Generator().manual_seed(1)
    return torch.linspace(-1, 1, rows, dtype=torch.float64), torch.randn(rows, cols, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("mask, kept", [(True, list(range(6))), (torch.tensor(True), list(range(6))),
                                        (torch.tensor([True, False, True, True, False, True]), [0, 2, 3, 5])])
def test_a_mask_of_one_plate_keeps_its_points(mask, kept):
    x = torch.linspace(-1, 1, 6, dtype=torch.float64)
    y = torch.sin(3 * x)
    samples = draws()
    traced = pyro_arviz.pointwise_log_likelihood(line, samples, (x, y, mask))
    w = samples["w"]
    expected = torch.distributions.Normal(w[..., :1] * x + w[..., 1:], NOISE).log_prob(y)[..., kept]
    loglik = traced.log_likelihood["y"]
    assert torch.allclose(torch.as_tensor(loglik.values), expected, rtol=1e-12)
    if len(kept) == 6:  # nothing left out: no coordinate, as before
        assert "y_dim_0" not in loglik.coords
    else:
        assert list(loglik["y_dim_0"].values) == kept
        assert loglik["y_dim_0"].attrs["original_size"] == 6
    assert torch.equal(torch.as_tensor(traced.observed_data["y"].values), y[kept])
    assert traced.posterior_predictive["y"].shape == (2, 5, len(kept))


def test_a_mask_broadcast_across_a_plate_keeps_the_arrays_shape():
    x, y = grid_data()
    mask = torch.tensor([[True], [False], [True], [True]])  # whole rows, broadcast over the columns
    samples = draws()
    traced = pyro_arviz.pointwise_log_likelihood(grid, samples, (x, y, mask))
    loglik = traced.log_likelihood["y"]
    assert loglik.dims == ("chain", "draw", "y_dim_0", "y_dim_1")
    assert list(loglik["y_dim_0"].values) == [0, 2, 3]
    assert "y_dim_1" not in loglik.coords
    expected = expected_grid(samples, x, y)[..., [0, 2, 3], :]
    assert torch.allclose(torch.as_tensor(loglik.values), expected, rtol=1e-12)


def test_a_pattern_over_two_plates_flattens_the_kept_points_with_their_positions():
    x, y = grid_data()
    mask = torch.tensor([[True, False, True], [False, True, True], [True, True, True], [False, False, False]])
    samples = draws()
    traced = pyro_arviz.pointwise_log_likelihood(grid, samples, (x, y, mask))
    loglik = traced.log_likelihood["y"]
    rows, cols = np.nonzero(mask.numpy())
    assert loglik.dims == ("chain", "draw", "y_point")
    assert list(loglik["y_dim_0"].values) == list(rows) and list(loglik["y_dim_1"].values) == list(cols)
    expected = expected_grid(samples, x, y)[..., rows, cols]
    assert torch.allclose(torch.as_tensor(loglik.values), expected, rtol=1e-12)
    assert torch.equal(torch.as_tensor(traced.observed_data["y"].values), y[rows, cols])
    # dims= names the site's original axes, coords= labels every point of them
    groups = label(groups_of(traced), dims={"y": ["row", "col"]},
                   coords={"row": list("abcd"), "col": ["u", "v", "t"]})
    for group in ("log_likelihood", "observed_data", "posterior_predictive"):
        ds = groups[group]
        assert list(ds["row"].values) == [list("abcd")[r] for r in rows], group
        assert list(ds["col"].values) == [["u", "v", "t"][c] for c in cols], group
        assert ds["y"].dims[-1] == "y_point"


def groups_of(traced):
    return {"log_likelihood": traced.log_likelihood, "posterior_predictive": traced.posterior_predictive,
            "observed_data": traced.observed_data}


def test_dims_and_coords_label_the_kept_points_of_one_plate():
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    mask = torch.tensor([True, False, True, True, False])
    traced = pyro_arviz.pointwise_log_likelihood(line, draws(), (x, torch.cos(x), mask))
    names = ["p", "q", "r", "s", "t"]
    groups = label(groups_of(traced), dims={"y": ["point"]}, coords={"point": names})
    for group, ds in groups.items():
        assert list(ds["point"].values) == ["p", "r", "s"], group
    with pytest.raises(ValueError, match=r"coords\['point'\] has 3 values, but dimension 'point' has size 5 "
                                         r"\(in group '\w+', which keeps 3 of them: the others are masked\)"):
        label(groups_of(traced), dims={"y": ["point"]}, coords={"point": ["p", "r", "s"]})
    # only renamed, the axis keeps the original positions
    renamed = label(groups_of(traced), dims={"y": ["point"]})["log_likelihood"]
    assert list(renamed["point"].values) == [0, 2, 3]


def test_a_site_masked_entirely_is_left_out_and_no_data_at_all_is_refused():
    x, y = grid_data()

    def two_sites(x, y):
        line(x, y[:, 0], True)
        with pyro.plate("more", x.shape[0]), poutine.mask(mask=False):
            pyro.sample("z", dist.Normal(0.0, 1.0), obs=y[:, 1])

    traced = pyro_arviz.pointwise_log_likelihood(two_sites, draws(), (x, y))
    assert list(traced.log_likelihood.data_vars) == ["y"]
    assert list(traced.observed_data.data_vars) == ["y"]
    with pytest.raises(ValueError, match=r"every point of the observed sites \['y'\] is masked"):
        pyro_arviz.pointwise_log_likelihood(line, draws(), (x, y[:, 0], False))


def test_a_mask_that_depends_on_the_latents_is_refused_naming_the_site():
    def latent_mask(x, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]), poutine.mask(mask=w[0] * x > 0):
            pyro.sample("obs", dist.Normal(w[1], 1.0), obs=y)

    x = torch.linspace(-1, 1, 4, dtype=torch.float64)
    samples = {"w": torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)}
    with pytest.raises(ValueError, match=r"the mask of observed site 'obs' keeps other points at draw 1 of "
                                         r"chain 0 \(2 of 4\) than at the first draw \(2\): it depends on the latents"):
        pyro_arviz.pointwise_log_likelihood(latent_mask, samples, (x, x))


def test_factors_count_deterministic_sites_do_not():
    """pyro.factor is a likelihood term (pyro_pt tempers it): in log_likelihood, with its mask;
    pyro.deterministic is not data: in posterior, at every draw, mask or not."""
    x = torch.linspace(-1, 1, 4, dtype=torch.float64)
    mask = torch.tensor([True, True, False, True])

    def with_factor(x):
        w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]), poutine.mask(mask=mask):
            pyro.deterministic("fit", w[0] * x + w[1])
            pyro.factor("huber", -torch.nn.functional.huber_loss(w[0] * x + w[1], x, reduction="none"))

    samples = draws()
    traced = pyro_arviz.pointwise_log_likelihood(with_factor, samples, (x,))
    w = samples["w"]
    fit = w[..., :1] * x + w[..., 1:]
    assert list(traced.log_likelihood.data_vars) == ["huber"]
    expected = -torch.nn.functional.huber_loss(fit, x.expand_as(fit), reduction="none")[..., [0, 1, 3]]
    assert torch.allclose(torch.as_tensor(traced.log_likelihood["huber"].values), expected, rtol=1e-12)
    assert not traced.observed_data.data_vars and not traced.posterior_predictive.data_vars
    assert torch.allclose(torch.as_tensor(traced.deterministic["fit"].values), fit, rtol=1e-12)
    # without log_likelihood the model still runs at each draw for its deterministic sites
    quick = pyro_arviz.pointwise_log_likelihood(with_factor, samples, (x,), log_likelihood=False)
    assert not quick.log_likelihood.data_vars
    assert torch.allclose(torch.as_tensor(quick.deterministic["fit"].values), fit, rtol=1e-12)


def test_obs_mask_exports_the_observed_part_and_records_the_imputed_site():
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    y = torch.tensor([0.1, 0.0, -0.4, 0.0, 0.9], dtype=torch.float64)  # 0: missing
    observed = torch.tensor([True, False, True, False, True])

    def missing(x, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(w[0] * x + w[1], NOISE), obs=y, obs_mask=observed)

    samples = draws(chains=1)
    samples["y_unobserved"] = torch.randn((1, 5, 5), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    traced = pyro_arviz.pointwise_log_likelihood(missing, samples, (x, y))
    assert list(traced.log_likelihood.data_vars) == ["y_observed"]
    loglik = traced.log_likelihood["y_observed"]
    assert list(loglik["y_observed_dim_0"].values) == [0, 2, 4]
    w = samples["w"]
    expected = torch.distributions.Normal(w[..., :1] * x + w[..., 1:], NOISE).log_prob(y)[..., [0, 2, 4]]
    assert torch.allclose(torch.as_tensor(loglik.values), expected, rtol=1e-12)
    imputed = torch.as_tensor(traced.deterministic["y"].values)
    assert torch.equal(imputed[..., [0, 2, 4]], y[[0, 2, 4]].expand(1, 5, 3))
    assert torch.equal(imputed[..., [1, 3]], samples["y_unobserved"][..., [1, 3]])


def test_kept_points_of_distribution_masks():
    def site(fn, mask=None):
        return {"name": "y", "fn": fn, "mask": mask}

    m = torch.tensor([True, False, True])
    assert kept_points(site(dist.Normal(torch.zeros(3), 1.0).mask(m))).tolist() == [True, False, True]
    assert kept_points(site(dist.Normal(torch.zeros(3), 1.0).mask(False))).tolist() == [False] * 3
    # a mask inside an event keeps a point while any of its elements counts
    inner = torch.tensor([[True, False], [False, False], [False, True]])
    fn = dist.Normal(torch.zeros(3, 2), 1.0).mask(inner).to_event(1)
    assert kept_points(site(fn)).tolist() == [True, False, True]
    assert kept_points(site(dist.Normal(torch.zeros(3), 1.0), torch.tensor([True]))).tolist() == [True] * 3
    with pytest.raises(ValueError, match=r"the mask of observed site 'y' \(poutine.mask\) has shape \(2,\)"):
        kept_points(site(dist.Normal(torch.zeros(3), 1.0), torch.tensor([True, False])))


def test_kept_positions_survive_netcdf(tmp_path):
    x, y = grid_data()
    mask = torch.tensor([[True, False, True], [False, True, True], [True, True, True], [False, False, False]])
    traced = pyro_arviz.pointwise_log_likelihood(grid, draws(), (x, y, mask))
    data = pyro_arviz.build({"posterior": pyro_arviz.dataset({k: v.numpy() for k, v in draws().items()}),
                             **groups_of(traced)})
    data.to_netcdf(str(tmp_path / "masked.nc"))
    loaded = az.from_netcdf(str(tmp_path / "masked.nc"))
    for name in ("y_dim_0", "y_dim_1"):
        coord = loaded["log_likelihood"][name]
        assert (coord.values == traced.log_likelihood[name].values).all()
        assert int(coord.attrs["original_size"]) == mask.shape[int(coord.attrs["site_axis"])]

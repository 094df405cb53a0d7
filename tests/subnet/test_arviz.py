"""to_inference_data: groups, shapes and values that az.loo / az.compare can use."""

import warnings

import pytest
import torch
from subnet_models import mlp_data, mlp_model, random_loc

from pyro_subnet import SubnetworkLaplace, to_inference_data

az = pytest.importorskip("arviz")


def test_inference_data_groups_and_loo():
    x, y = mlp_data(n=25)
    guide = SubnetworkLaplace(mlp_model, subnetwork_size=6)
    guide(x, y)
    random_loc(guide, seed=3, scale=0.5)
    post = guide.laplace_approximation(x, y)
    idata = to_inference_data(post, x, y, num_samples=200)
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data"):
        assert hasattr(idata, group)
    assert idata.posterior["W1"].shape == (1, 200, 5, 2)
    assert idata.posterior["sigma"].shape == (1, 200)
    assert idata.log_likelihood["obs"].shape == (1, 200, 25)
    assert idata.posterior_predictive["obs"].shape == (1, 200, 25, 2)
    assert torch.allclose(torch.as_tensor(idata.observed_data["obs"].values), y)

    # the pointwise log-likelihood at a draw equals the model's own log density there
    W1 = torch.as_tensor(idata.posterior["W1"].values[0, 0])
    b1, W2, b2 = (torch.as_tensor(idata.posterior[k].values[0, 0]) for k in ("b1", "W2", "b2"))
    sigma = torch.as_tensor(idata.posterior["sigma"].values[0, 0])
    f = torch.tanh(x @ W1.T + b1) @ W2.T + b2
    ll = torch.distributions.Normal(f, sigma).log_prob(y).sum(-1)
    assert torch.allclose(torch.as_tensor(idata.log_likelihood["obs"].values[0, 0]), ll)

    guide.selection, guide.subnetwork_size = "wasserstein", 1
    map_like = to_inference_data(guide.laplace_approximation(x, y), x, y, num_samples=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata)
        cmp = az.compare({"subnet": idata, "one_coordinate": map_like})
    assert torch.isfinite(torch.tensor(loo.elpd_loo))
    assert set(cmp.index) == {"subnet", "one_coordinate"}

    with pytest.raises(ValueError, match="pass the model's arguments including the observed values"):
        to_inference_data(post, x, num_samples=5)
    with pytest.raises(TypeError, match="SubnetworkLaplacePosterior"):
        to_inference_data(guide, x, y)

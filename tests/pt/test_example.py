"""examples/pt_bimodal.py runs end to end in its quick mode."""

import os
import sys

import pytest
import torch

import pyro.distributions as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def test_pt_bimodal_quick(capsys):
    import pt_bimodal

    result = pt_bimodal.main(["--quick"])
    out = capsys.readouterr().out
    assert "Round trips" in out and "truth (quadrature)" in out
    # The example's quadrature against an independent grid sum of the same posterior.
    y, z = pt_bimodal.make_data()
    theta = torch.linspace(-8, 8, 160001, dtype=torch.float64)
    log_post = dist.Normal(0.0, pt_bimodal.PRIOR_SCALE).log_prob(theta)
    log_post = log_post + dist.Normal(theta.unsqueeze(-1) ** 2, pt_bimodal.NOISE).log_prob(
        y.double()).sum(-1)
    log_post = log_post + dist.Normal(theta, pt_bimodal.READING_NOISE).log_prob(z.double())
    density = torch.exp(log_post - log_post.max())
    assert result["truth"][1] == pytest.approx(float(density[theta > 0].sum() / density.sum()),
                                               abs=1e-4)
    assert len(result["swap_acceptance"]) == len(result["temperatures"]) - 1
    assert result["nuts_weights"][1] == 0.0  # NUTS stays in the small mode it starts in
    assert result["round_trips"] > 0


def test_bnn_example_flags_a_constant_chain_and_matches_pyro_ess():
    import pt_torchrun
    from pyro.ops.stats import effective_sample_size

    generator = torch.Generator().manual_seed(0)
    moving = torch.randn(200, generator=generator).cumsum(0) * 0.1
    moving = moving + torch.randn(200, generator=generator)
    values = torch.stack([moving, torch.full((200,), 0.7)], -1)
    rhat, ess, constant = pt_torchrun.chain_diagnostics(values)
    assert constant.tolist() == [False, True]
    # A constant column must not spoil the others (Pyro's batched ESS would make all NaN).
    assert torch.isnan(ess[1]) and torch.isnan(rhat[1])
    # The moving column's ESS is Pyro's, from an independent call on the same draws.
    expected = effective_sample_size(moving.double().reshape(1, -1), 0, 1)
    assert float(ess[0]) == pytest.approx(float(expected), rel=1e-9)
    assert "CONSTANT CHAIN" in pt_torchrun.format_diag(float(rhat[1]), float(ess[1]), True, 200)
    assert "ESS" in pt_torchrun.format_diag(float(rhat[0]), float(ess[0]), False, 200)


def test_bnn_example_flags_a_drifting_chain():
    import pt_torchrun

    generator = torch.Generator().manual_seed(1)
    steady = torch.randn(400, generator=generator)
    drifting = steady + torch.linspace(0.0, 3.0, 400)  # halves 1.5 sd apart
    rhat, ess, constant = pt_torchrun.chain_diagnostics(torch.stack([steady, drifting], -1))
    assert float(rhat[0]) < pt_torchrun.RHAT_LIMIT < float(rhat[1])
    assert "CHECK: R-hat" not in pt_torchrun.format_diag(float(rhat[0]), float(ess[0]), False,
                                                         400)
    assert "CHECK: R-hat" in pt_torchrun.format_diag(float(rhat[1]), float(ess[1]), False, 400)

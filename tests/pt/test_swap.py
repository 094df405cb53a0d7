import math

import pytest
import torch

from pyro_pt.swap import accept_swap, draw_round_uniforms, swap_log_ratio, swap_pairs


def test_swap_log_ratio_equals_ratio_of_joint_tempered_densities():
    # The ratio of the swapped to the current joint density, prior terms included: they cancel
    # only because the prior is not tempered.
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        beta_i, beta_j = sorted(torch.rand(2, generator=generator).tolist(), reverse=True)
        lp_i, lp_j, ll_i, ll_j = (10 * torch.randn(4, generator=generator)).tolist()

        def log_target(beta, lp, ll):
            return lp + beta * ll

        joint_swapped = log_target(beta_i, lp_j, ll_j) + log_target(beta_j, lp_i, ll_i)
        joint_current = log_target(beta_i, lp_i, ll_i) + log_target(beta_j, lp_j, ll_j)
        expected = joint_swapped - joint_current
        assert swap_log_ratio(beta_i, beta_j, ll_i, ll_j) == pytest.approx(expected, abs=1e-9)


def test_swap_log_ratio_sign():
    # The colder replica (beta_i > beta_j) holding the worse fit: always accept.
    assert swap_log_ratio(1.0, 0.5, -10.0, -2.0) == pytest.approx(4.0)
    assert swap_log_ratio(1.0, 0.5, -2.0, -10.0) == pytest.approx(-4.0)
    # Elementwise on tensors.
    out = swap_log_ratio(torch.tensor([1.0, 0.5]), torch.tensor([0.5, 0.0]),
                         torch.tensor([-3.0, -1.0]), torch.tensor([-1.0, -5.0]))
    assert torch.allclose(out, torch.tensor([1.0, -2.0]))


def test_accept_swap_probability_and_nan_refused():
    assert accept_swap(0.5, 0.999) == (True, 1.0)
    accepted, prob = accept_swap(math.log(0.3), 0.29)
    assert accepted and prob == pytest.approx(0.3)
    assert accept_swap(math.log(0.3), 0.31)[0] is False
    assert accept_swap(float("nan"), 0.0) == (False, 0.0)
    assert accept_swap(float("-inf"), 0.0) == (False, 0.0)
    # Two impossible states: -inf - -inf is NaN -> refused; a cold impossible state against a
    # possible one is swapped out.
    inf = float("inf")
    assert accept_swap(swap_log_ratio(1.0, 0.0, -inf, -inf), 0.0)[0] is False
    assert accept_swap(swap_log_ratio(1.0, 0.0, -inf, -1.0), 0.999)[0] is True


def test_deo_alternates_even_and_odd_pairs():
    assert swap_pairs("deo", 0, 6) == [0, 2, 4]
    assert swap_pairs("deo", 1, 6) == [1, 3]
    assert swap_pairs("deo", 2, 5) == [0, 2]
    assert swap_pairs("deo", 3, 5) == [1, 3]
    assert swap_pairs("deo", 0, 1) == []


def test_seo_follows_the_coin_and_sequential_takes_all_pairs():
    assert swap_pairs("seo", 7, 6, coin=0.2) == [1, 3]
    assert swap_pairs("seo", 7, 6, coin=0.7) == [0, 2, 4]
    assert swap_pairs("sequential", 3, 5) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="coin"):
        swap_pairs("seo", 0, 4)
    with pytest.raises(ValueError, match="swap_scheme"):
        swap_pairs("random", 0, 4)


def test_round_uniforms_have_a_fixed_count():
    generator = torch.Generator().manual_seed(0)
    coin, uniforms = draw_round_uniforms(generator, 5)
    assert 0 <= coin < 1 and len(uniforms) == 4
    generator_again = torch.Generator().manual_seed(0)
    assert draw_round_uniforms(generator_again, 5) == (coin, uniforms)

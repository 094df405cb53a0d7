"""Parallelism invariance: the same seed gives the same cold chain on any number of ranks."""

import pytest
import torch

from .distributed import run_linear, spawn

SEQUENTIAL = {"num_replicas": 4, "max_temperature": 20.0, "explorer": "nuts",
              "explorer_kwargs": {"max_tree_depth": 2}, "swap_scheme": "sequential"}
# Five rungs on two ranks: uneven blocks (3 + 2), and a prior rung drawn exactly.
DEO_PRIOR_RUNG = {"num_replicas": 5, "max_temperature": float("inf"), "explorer": "hmc",
                  "explorer_kwargs": {"num_steps": 2}}


def assert_identical(a, b):
    assert torch.equal(a["w"], b["w"])
    assert torch.equal(a["swap_accepted"].nan_to_num(-1), b["swap_accepted"].nan_to_num(-1))
    assert torch.equal(a["log_likelihood"], b["log_likelihood"])
    for key in ("swap_acceptance", "local_acceptance", "round_trips"):
        assert a[key] == b[key], key


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, kernel, boundary_pairs",
    [(2, SEQUENTIAL, [1]), (4, SEQUENTIAL, [0, 1, 2]), (2, DEO_PRIOR_RUNG, [2])],
)
def test_world_sizes_give_bitwise_identical_chains(world_size, kernel, boundary_pairs, tmp_path):
    torch.set_num_threads(1)
    reference = run_linear(kernel)
    assert reference["world_size"] == 1
    for pair in boundary_pairs:  # accepted swaps move states across rank boundaries
        assert reference["swap_accepted"][:, pair].nan_to_num(0).sum() > 0
    results = spawn(world_size, tmp_path, run_linear, kernel)
    for result in results:
        assert result["world_size"] == world_size
        assert_identical(result, reference)

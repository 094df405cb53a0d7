"""Parallelism invariance: the same seed gives the same cold chain on any number of ranks."""

import pytest
import torch

from .distributed import SETUP_REFUSALS, run_and_die, run_linear, spawn_catching

SEQUENTIAL = {"num_replicas": 4, "max_temperature": 20.0, "explorer": "nuts",
              "explorer_kwargs": {"max_tree_depth": 2}, "swap_scheme": "sequential"}
# Five rungs on two ranks: uneven blocks (3 + 2), and a prior rung drawn exactly.
DEO_PRIOR_RUNG = {"num_replicas": 5, "max_temperature": float("inf"), "explorer": "hmc",
                  "explorer_kwargs": {"num_steps": 2}}

# Ladder adaptation after the first warmup round (scan 4): every rank must adapt identically.
DEO_ADAPTED = {"num_replicas": 4, "max_temperature": 20.0, "explorer": "rwmh",
               "adapt_temperatures": True}


def assert_identical(a, b):
    assert torch.equal(a["w"], b["w"])
    assert torch.equal(a["swap_accepted"].nan_to_num(-1), b["swap_accepted"].nan_to_num(-1))
    assert torch.equal(a["log_likelihood"], b["log_likelihood"])
    for key in ("swap_acceptance", "local_acceptance", "round_trips", "temperatures"):
        assert a[key] == b[key], key
    # NaN-safe: the report of a short run has NaN log Z in rounds without swaps.
    assert str(a["report"]) == str(b["report"])
    assert len(a["report"]["round"]) >= 3


# A variational reference fitted at scan 60 from the cold chain's draws: every rank the same q;
# five rungs make two legs (3 to q, 2 to the prior), whose bridge (pair 2, rungs 0 and 3)
# crosses the ranks; three make one leg.
DEO_VARIATIONAL = {"num_replicas": 5, "explorer": "hmc", "explorer_kwargs": {"num_steps": 2},
                   "reference": "variational", "warmup_steps": 70, "num_ladders": 1}
DEO_ONE_LEG = {**DEO_VARIATIONAL, "num_replicas": 3}

# Two ladders (pyro_pt.ensemble) of 5 rungs on 2 ranks: each rank's rungs of both ladders in
# one batched group, the pooled adaptation and records, MCMC's draws in ladder blocks.
DEO_ENSEMBLE = {**DEO_PRIOR_RUNG, "num_ladders": 2, "warmup_steps": 20}
# Two ladders of the two legs: every rank fits the same q to both ladders' cold draws.
DEO_VARIATIONAL_ENSEMBLE = {**DEO_VARIATIONAL, "num_ladders": 2}

KERNELS = {"sequential": SEQUENTIAL, "deo_prior_rung": DEO_PRIOR_RUNG, "deo_adapted": DEO_ADAPTED,
           "deo_variational": DEO_VARIATIONAL, "deo_one_leg": DEO_ONE_LEG,
           "deo_ensemble": DEO_ENSEMBLE, "deo_variational_ensemble": DEO_VARIATIONAL_ENSEMBLE}


@pytest.fixture(scope="module")
def two_ranks(two_rank_group):
    """Each kernel of KERNELS run in turn on 2 ranks (tests/pt/conftest.py: one spawn for every
    2-rank task): {name: [result of rank 0, of rank 1]}."""
    results = [r["kernels"] for r in two_rank_group["ranks"]]
    return {name: [r[i] for r in results] for i, name in enumerate(KERNELS)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, kernel, boundary_pairs",
    [(2, "sequential", [1]), (4, "sequential", [0, 1, 2]), (2, "deo_prior_rung", [2]),
     (2, "deo_adapted", [1]), (2, "deo_variational", [2]), (2, "deo_one_leg", [1]),
     (2, "deo_ensemble", [2]), (2, "deo_variational_ensemble", [2]),
     (4, "deo_variational", [1, 2])],
)
def test_world_sizes_give_bitwise_identical_chains(world_size, kernel, boundary_pairs, request):
    torch.set_num_threads(1)
    reference = run_linear(KERNELS[kernel])
    assert reference["world_size"] == 1
    for pair in boundary_pairs:  # accepted swaps move states across rank boundaries
        assert reference["swap_accepted"][:, pair].nan_to_num(0).sum() > 0
    if world_size == 2:
        results = request.getfixturevalue("two_ranks")[kernel]
    else:  # the 4-rank spawn shared with test_checkpoint (tests/pt/conftest.py)
        results = [r[kernel] for r in request.getfixturevalue("four_rank_group")]
    for result in results:
        assert result["world_size"] == world_size
        assert_identical(result, reference)


def errors(results):
    return [r["message"] if isinstance(r, dict) else r for r in results]


def test_more_ranks_than_replicas_is_an_error(four_rank_group):
    # 3 replicas on the 4-rank spawn (tests/pt/conftest.py), after its runs.
    results = [r["too_many_ranks"] for r in four_rank_group]
    for message in errors(results):
        assert "3 replicas but the process group has 4 ranks" in message


@pytest.fixture(scope="module")
def refusals(two_rank_group):
    """Every 2-rank set-up refusal below, run in turn on the 2-rank spawn (tests/pt/conftest.py),
    after its runs: {name: [result of rank 0, of rank 1]}."""
    results = [r["refusals"] for r in two_rank_group["ranks"]]
    return {name: [r[name] for r in results] for name in SETUP_REFUSALS}


def test_multiple_chains_under_a_process_group_is_an_error(refusals):
    for message in errors(refusals["num_chains"]):
        assert "num_chains > 1" in message and "new_group" in message


def test_ranks_with_different_models_fail_at_setup(refusals):
    for message in errors(refusals["models"]):
        assert "ranks disagree on the model's latent sites" in message


def test_ranks_with_different_ladders_fail_at_setup(refusals):
    # Same model and block sizes, so nothing else would notice: the swaps would pair rungs
    # whose temperatures the ranks disagree on.
    for message in errors(refusals["ladders"]):
        assert "ranks disagree on the kernel's settings ['temperatures']" in message


@pytest.mark.parametrize("where, reason", [
    ("model", "ValueError: the data of rank 1 are unusable"),
    ("explorer", "MemoryError: rank 1 ran out of memory building its rungs"),
])
def test_a_setup_failure_on_one_rank_stops_every_rank_with_its_reason(where, reason, refusals):
    # Before the set-up check, rank 0 stopped only when gloo saw rank 1's connection close,
    # with a "lost rank" error that did not say why; the message is what this test checks.
    results = refusals[where]
    assert reason.split(": ", 1)[1] in results[1]["message"]  # rank 1: its own error
    assert results[1]["error"] == reason.split(":")[0]
    assert results[0]["error"] == "RuntimeError"
    assert "set-up failed on rank(s) [1]" in results[0]["message"]
    assert reason in results[0]["message"]


@pytest.mark.parametrize("dead_rank", [1, 0])
def test_a_dead_rank_is_named_by_the_survivors(dead_rank, tmp_path):
    # spawn_catching's wait is the hang guard; what is checked is the message, not the time.
    # The backend's timeout leaves room for a rank's set-up on a loaded machine (the parallel
    # suite): the death itself closes the connection, which the survivor sees at once.
    results = spawn_catching(2, tmp_path, run_and_die, dead_rank, 8, timeout=60.0)
    assert results[dead_rank] is None  # it died without a word
    message = results[1 - dead_rank]["message"]
    if dead_rank == 0:  # rank 0 hosts the rendezvous store here
        assert "its host (usually rank 0) is lost" in message
    else:
        assert "lost rank(s) [1]" in message

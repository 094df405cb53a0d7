"""
Data-parallel subnetwork Laplace: every rank holds a shard of the data (unequal sizes) and ends
with the posterior of one process holding all of it.

The Laplace step is compared at one MAP (the one-process MAP copied to every rank): the
subnetwork equal, the covariance, the fitted prior scale and the log evidence to 1e-10
relative (float64; only the order of the additions differs, ~1e-14 measured). The MAP phase
(DataParallelELBO, 100 Adam steps from the same seed) is compared to the one-process MAP to
1e-9 relative: the ranks' gradients are the one-process gradient up to rounding (~1e-16), which
Adam's steps carry but do not amplify on this model (4e-13 measured); the posterior after it is
then compared to 1e-9 as well. Planted bugs (each rank's prior counted, the sums over the ranks
left out) must fail those comparisons.
"""

import pytest
import shards
import torch
import torch.distributed as tdist
from pyro.infer import SVI, Trace_ELBO

import pyro
from pyro_subnet import DataParallelELBO, DiagonalLaplace, SubnetworkLaplace

RTOL = 1e-10  # the Laplace step at one MAP
MAP_RTOL = 1e-9  # after the MAP phase
STEPS = 100  # of the MAP phase
EXACT = {"subnetwork_size": 5, "selection": "wasserstein", "variance": "exact", "prior_scale": 2.0}
DIAGONAL = {"prior_scale": 1.0}


def rel(a, b):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max() / b.abs().max())


def assert_same_posterior(result, reference, rtol=RTOL):
    assert torch.equal(result["indices"], reference["indices"])
    assert rel(result["covariance"], reference["covariance"]) < rtol
    if "log_evidence" in reference:
        assert rel(result["prior_scale"], reference["prior_scale"]) < rtol
        assert rel(result["log_evidence"], reference["log_evidence"]) < rtol
        assert rel(result["marginal_variance"], reference["marginal_variance"]) < rtol


def differs(result, reference, rtol=RTOL):
    """Whether ``result`` fails the comparison: an error (the ranks' own checks caught it), other
    coordinates or another covariance."""
    if "error" in result:
        return True
    return (not torch.equal(result["indices"], reference["indices"])
            or rel(result["covariance"], reference["covariance"]) > rtol)


@pytest.fixture(scope="module")
def reference():
    """One process, all the data: the MAP phase and the posteriors at its MAP."""
    out = {"map": shards.one_process_map(STEPS)}
    u = out["map"]["loc"]
    out["laplace"] = shards.laplace(u, 1)
    out["exact"] = shards.laplace(u, 1, SubnetworkLaplace, EXACT)
    out["diagonal"] = shards.laplace(u, 1, DiagonalLaplace, DIAGONAL)
    out["export"] = shards.export(u, 1)
    return out


def tasks(u, world_size):
    return [("laplace", shards.laplace, (u, world_size), False),
            ("exact", shards.laplace, (u, world_size, SubnetworkLaplace, EXACT), False),
            ("diagonal", shards.laplace, (u, world_size, DiagonalLaplace, DIAGONAL), False),
            ("map", shards.map_phase, (world_size, STEPS), False)]


@pytest.fixture(scope="module")
def two_ranks(reference, tmp_path_factory):
    """Every 2-rank task in one spawn: the posteriors, the planted bugs, then the refusals
    (each raised by every rank after the same collective, so the group stays in step)."""
    u = reference["map"]["loc"]
    bugs = [("bug " + bug + " " + step, shards.planted, (bug, fn, *args), True)
            for bug in ("prior_per_rank", "curvature_not_reduced")
            for step, fn, args in [("laplace", shards.laplace, (u, 2)), ("map", shards.map_phase, (2, STEPS))]]
    bugs.append(("bug ggn_not_reduced laplace", shards.planted, ("ggn_not_reduced", shards.laplace, u, 2), True))
    refusals = [("refuse " + kind, shards.disagreeing, (kind, u, 2), True)
                for kind in ("skipped_map", "size", "map", "random")]
    refusals += [("refuse map " + kind, shards.map_disagreeing, (kind,), True) for kind in ("seed", "model")]
    refusals += [("export", shards.export, (u, 2), True), ("refuse export", shards.export, (u, 2, 2), True)]
    refusals += [("subsampled " + where, shards.subsampled, (where,), True) for where in ("map", "laplace")]
    ranks = shards.spawn(2, tmp_path_factory.mktemp("two_ranks"), shards.run_tasks, tasks(u, 2) + bugs + refusals)
    assert all(isinstance(r, dict) and "error" not in r for r in ranks), ranks
    return ranks


@pytest.mark.slow
@pytest.mark.parametrize("task", ["laplace", "exact", "diagonal"])
def test_two_ranks_give_the_one_process_posterior(task, two_ranks, reference):
    for rank in two_ranks:
        assert_same_posterior(rank[task], reference[task])


@pytest.mark.slow
def test_two_ranks_map_phase_gives_the_one_process_map(two_ranks, reference):
    ref = reference["map"]
    for rank in two_ranks:
        assert rel(rank["map"]["loc"], ref["loc"]) < MAP_RTOL
        assert rel(rank["map"]["losses"], ref["losses"]) < MAP_RTOL  # the one-process loss
        assert_same_posterior(rank["map"], ref, MAP_RTOL)
    assert ref["losses"][-1] < ref["losses"][0] - 10  # the MAP phase did move


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["prior_per_rank", "curvature_not_reduced"])
def test_planted_bugs_fail_the_comparison(bug, two_ranks, reference):
    # Without the sums the ranks select, or fit, different things: the agreement checks stop
    # them (an error), or the posterior differs.
    for rank in two_ranks:
        assert differs(rank[f"bug {bug} laplace"], reference["laplace"])
        assert differs(rank[f"bug {bug} map"], reference["map"], MAP_RTOL)
    if bug == "prior_per_rank":  # the MAP itself moves
        assert rel(two_ranks[0][f"bug {bug} map"]["loc"], reference["map"]["loc"]) > 1e3 * MAP_RTOL


@pytest.mark.slow
def test_a_curvature_not_summed_fails_the_comparison(two_ranks, reference):
    # the selection's sums kept: the ranks agree on the subnetwork, not on its covariance
    for rank in two_ranks:
        result = rank["bug ggn_not_reduced laplace"]
        assert torch.equal(result["indices"], reference["laplace"]["indices"])
        assert rel(result["covariance"], reference["laplace"]["covariance"]) > 1e-3
        assert rel(result["log_evidence"], reference["laplace"]["log_evidence"]) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("kind, words", [
    ("size", ["settings", "'subnetwork_size': '9'", "rank 1 has"]),
    ("map", ["MAP (sha256)", "rank 1 has", "DataParallelELBO"]),
    ("random", ["subnetwork indices (sha256)", "rank 1 has"]),
])
def test_ranks_that_disagree_stop_every_rank_naming_the_rank(kind, words, two_ranks):
    for rank in two_ranks:
        error = rank["refuse " + kind]
        assert error["error"] == "ValueError"
        for word in words:
            assert word in error["message"], error["message"]


@pytest.mark.slow
def test_a_rank_that_skipped_the_map_phase_stops_every_rank(two_ranks):
    own, other = two_ranks[1]["refuse skipped_map"], two_ranks[0]["refuse skipped_map"]
    assert own["error"] == "ValueError" and "needs a trained guide" in own["message"]
    assert other["error"] == "RuntimeError"
    assert "failed on rank(s) [1]" in other["message"] and "needs a trained guide" in other["message"]


@pytest.mark.slow
def test_the_map_phase_stops_every_rank_at_its_first_step_when_ranks_disagree(two_ranks):
    for rank in two_ranks:  # seeded otherwise: another initial MAP
        error = rank["refuse map seed"]
        assert error["error"] == "ValueError" and "initial parameter values (sha256)" in error["message"]
        assert "rank 1 has" in error["message"] and "seed every rank alike" in error["message"]
    own, other = two_ranks[1]["refuse map model"], two_ranks[0]["refuse map model"]
    assert own["error"] == "ValueError" and "the data of rank 1 are unusable" in own["message"]
    assert other["error"] == "RuntimeError" and "failed on rank(s) [1]" in other["message"]
    assert "the data of rank 1 are unusable" in other["message"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["map", "laplace"])
def test_a_subsampling_data_plate_is_refused(where, two_ranks):
    for rank in two_ranks:
        message = rank["subsampled " + where]["message"]
        assert "pyro.plate('data', 24) subsampled to" in message and "len(x_shard)" in message, message


@pytest.mark.slow
def test_the_ranks_exports_gather_into_the_one_process_pointwise_log_likelihood(two_ranks, reference):
    ref = reference["export"]
    assert ref["log_likelihood"].shape == (1, 50, shards.N)
    for rank in two_ranks:
        assert rel(rank["export"]["log_likelihood"], ref["log_likelihood"]) < RTOL
        assert (rank["export"]["observed"] == ref["observed"]).all()
        error = rank["refuse export"]
        assert error["error"] == "ValueError" and "posterior draws (sha256)" in error["message"]
        assert "rank 1 has" in error["message"] and "same seed" in error["message"]


@pytest.mark.slow
def test_four_ranks_give_the_one_process_posterior(reference, tmp_path):
    ranks = shards.spawn(4, tmp_path, shards.run_tasks, tasks(reference["map"]["loc"], 4))
    assert all(isinstance(r, dict) and "error" not in r for r in ranks), ranks
    for rank in ranks:
        for task in ("laplace", "exact", "diagonal"):
            assert_same_posterior(rank[task], reference[task])
        assert rel(rank["map"]["loc"], reference["map"]["loc"]) < MAP_RTOL
        assert_same_posterior(rank["map"], reference["map"], MAP_RTOL)


@pytest.mark.slow
def test_a_dead_rank_is_named_by_the_survivors(reference, tmp_path):
    # spawn's wait is the hang guard; what is checked is the message, not the time
    ranks = shards.spawn(2, tmp_path, shards.die_in_curvature, reference["map"]["loc"], 1, timeout=20.0, wait=120.0)
    assert ranks[1] is None  # it died without a word
    assert ranks[0]["error"] == "RuntimeError"
    assert "failed on rank 0 of 2; lost rank(s) [1]" in ranks[0]["message"], ranks[0]["message"]


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2 or not tdist.is_nccl_available(),
                    reason="nccl needs at least two CUDA devices (one rank per GPU)")
def test_nccl_ranks_on_cuda_give_the_one_process_posterior(reference, tmp_path):
    ranks = shards.spawn(2, tmp_path, shards.on_cuda, reference["map"]["loc"], backend="nccl")
    for rank in ranks:
        assert isinstance(rank, dict) and "error" not in rank, rank
        assert_same_posterior(rank, reference["laplace"])


def test_one_process_data_parallel_elbo_is_its_elbo():
    x, y = shards.data()
    losses = []
    for loss in (Trace_ELBO(), DataParallelELBO(Trace_ELBO())):
        shards._start()
        guide = SubnetworkLaplace(shards.model, **shards.SPEC)
        svi = SVI(shards.model, guide, pyro.optim.Adam({"lr": 0.02}), loss)
        losses.append(torch.tensor([svi.step(x, y) for _ in range(5)]))
        assert svi.evaluate_loss(x, y) == pytest.approx(float(loss.loss(shards.model, guide, x, y)))
    assert torch.equal(losses[0], losses[1])


def test_data_parallel_elbo_refuses_what_is_no_elbo():
    with pytest.raises(TypeError, match="elbo must be a Pyro ELBO"):
        DataParallelELBO("trace")


@pytest.mark.parametrize("make", [lambda g: SubnetworkLaplace(shards.model, subnetwork_size=2, process_group=g),
                                  lambda g: DataParallelELBO(process_group=g)])
def test_a_process_group_that_is_none_is_refused(make):
    with pytest.raises(TypeError, match="process_group must be a torch.distributed process group"):
        make("world")

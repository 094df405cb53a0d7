"""Process groups shared by the multi-process tests of test_distributed and test_checkpoint.

Starting a spawn of gloo ranks costs more than most of what the tests then run in it (each rank
imports torch and Pyro: about 10 s for 2 ranks, 16 s for 4 on a loaded 2-core machine), so every
2-rank task runs in one spawn and every 4-rank task in another, each task seeded and checked on
its own, as when it had a spawn of its own.
"""

import pytest
import torch


@pytest.fixture(scope="session")
def two_rank_group(tmp_path_factory):
    """{"folder": where the 2-rank checkpoints are, "ranks": [rank 0's {task: result},
    rank 1's]}: the 2-rank chains of test_distributed, the checkpoints of test_checkpoint
    (written at scan SHORT_SCAN) and, last, the set-up refusals. The backend's timeout is
    longer than the hang guard (``wait``), so a rank stuck in a collective is killed and
    leaves no result, rather than raising a timeout error in place of the message that the
    refusal tests check."""
    from .distributed import SETUP_REFUSALS, run_linear_each, run_setup_refusals, run_tasks
    from .distributed import spawn_catching
    from .test_checkpoint import write_on_ranks
    from .test_distributed import KERNELS

    torch.set_num_threads(1)
    folder = str(tmp_path_factory.mktemp("two_rank_checkpoints"))
    tasks = [
        ("kernels", run_linear_each, (list(KERNELS.values()),), False),
        ("checkpoints", write_on_ranks, (folder,), False),
        ("refusals", run_setup_refusals, (list(SETUP_REFUSALS),), False),
    ]
    ranks = spawn_catching(2, tmp_path_factory.mktemp("two_ranks"), run_tasks, tasks,
                           timeout=900.0, wait=300.0)
    # no rank died, hung or stopped with an error outside the refusals
    assert all(isinstance(r, dict) and "error" not in r for r in ranks), ranks
    return {"folder": folder, "ranks": ranks}


@pytest.fixture(scope="session")
def four_rank_group(tmp_path_factory, two_rank_group):
    """[rank r's {task: result}] of 4 ranks: the sequential chain of test_distributed, the
    random walk's and two ladders' 2-rank checkpoints resumed on 4 ranks (test_checkpoint) and,
    last, a ladder of
    3 replicas, refused on 4 ranks."""
    from .distributed import run_kernel, run_linear, run_tasks, spawn_catching
    from .test_checkpoint import resume_on_ranks
    from .test_distributed import KERNELS

    torch.set_num_threads(1)
    tasks = [
        ("sequential", run_linear, (KERNELS["sequential"],), False),
        ("deo_variational", run_linear, (KERNELS["deo_variational"],), False),
        ("resumed", resume_on_ranks, (two_rank_group["folder"], ("rwmh", "hmc_ensemble")),
         False),
        ("too_many_ranks", run_kernel, ({"num_replicas": 3, "explorer": "rwmh"},), True),
    ]
    ranks = spawn_catching(4, tmp_path_factory.mktemp("four_ranks"), run_tasks, tasks,
                           timeout=900.0, wait=300.0)
    assert all(isinstance(r, dict) and "error" not in r for r in ranks), ranks
    return ranks

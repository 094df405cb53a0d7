"""Helpers to run ParallelTempering under torch.distributed (gloo, 127.0.0.1) from pytest."""

import os

import torch
import torch.distributed as dist

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.explorers import RandomWalkMetropolis

from ..spawning import free_port, run_tasks, spawn, spawn_catching  # noqa: F401 (the tests import them from here)
from .models import linear_data, linear_model


def run_linear(kernel_kwargs, num_samples=20, warmup_steps=10, seed=0):
    """The same seeded run in any process; returns what every rank must agree on (a
    ``"warmup_steps"`` entry of ``kernel_kwargs`` replaces ``warmup_steps``)."""
    kernel_kwargs = dict(kernel_kwargs)
    warmup_steps = kernel_kwargs.pop("warmup_steps", warmup_steps)
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(linear_model, **kernel_kwargs)
    mcmc = MCMC(kernel, num_samples, warmup_steps, disable_progbar=True)
    mcmc.run(*linear_data())
    diag = mcmc.diagnostics()
    if kernel.run.comm.rank == 0:
        # After the run, one rank alone may ask the kernel (e.g. to plot): no collective.
        assert kernel.diagnostics()["swap_acceptance"] == diag["swap_acceptance"]["chain 0"]
    return {
        "w": mcmc.get_samples()["w"],
        "swap_accepted": diag["tempering_record"]["chain 0"]["swap_accepted"],
        "log_likelihood": diag["tempering_record"]["chain 0"]["log_likelihood"],
        "swap_acceptance": diag["swap_acceptance"]["chain 0"],
        "local_acceptance": diag["local_acceptance"]["chain 0"],
        "round_trips": diag["round_trips"]["chain 0"],
        "world_size": kernel.run.comm.world_size,
        "temperatures": kernel.temperatures,
        # Every number of the report but the seconds (each rank's own clock).
        "report": kernel.report.drop(columns="seconds").to_dict("list"),
    }


def run_linear_each(kernels):
    """:func:`run_linear` of each of ``kernels`` in turn, on one process group."""
    return [run_linear(kernel_kwargs) for kernel_kwargs in kernels]


def run_and_die(die_rank, die_at, num_samples=40):
    """A run in which rank ``die_rank`` exits abruptly at iteration ``die_at``."""
    def hook(kernel, params, stage, i):
        if dist.get_rank() == die_rank and i == die_at:
            os._exit(3)

    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=2, explorer="rwmh")
    mcmc = MCMC(kernel, num_samples, 5, disable_progbar=True, hook_fn=hook)
    mcmc.run(*linear_data())
    return "finished"


def run_kernel(kernel_kwargs, mcmc_kwargs=None, data=None):
    """Set up and run a small ParallelTempering under MCMC; returns "finished"."""
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, **kernel_kwargs)
    mcmc = MCMC(kernel, 5, 2, disable_progbar=True, **(mcmc_kwargs or {}))
    mcmc.run(*(data or linear_data()))
    return "finished"


def run_rank_dependent_data():
    """Rank 1 has one more feature than rank 0: the models disagree on latent shapes."""
    x, y = linear_data()
    if dist.get_rank() == 1:
        x = torch.cat([x, x[:, :1]], 1)

    def model(x, y):
        zeros = torch.zeros(x.shape[1], dtype=x.dtype)
        w = pyro.sample("w", pyro.distributions.Normal(zeros, 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", pyro.distributions.Normal(w @ x.T, 1.0), obs=y)

    pyro.set_rng_seed(0)
    MCMC(ParallelTempering(model, num_replicas=2, explorer="rwmh"), 5, 2,
         disable_progbar=True).run(x, y)
    return "finished"


def run_failing_on_rank_1(where):
    """A run whose set-up fails on rank 1 only: in the model's trace (``where="model"``) or
    when rank 1 builds the explorers of its rungs (``where="explorer"``)."""
    rank = dist.get_rank()

    def model(x, y):
        if where == "model" and rank == 1:
            raise ValueError("the data of rank 1 are unusable")
        linear_model(x, y)

    def explorer(potential_fn, **kwargs):
        if rank == 1:
            raise MemoryError("rank 1 ran out of memory building its rungs")
        return RandomWalkMetropolis(potential_fn, **kwargs)

    pyro.set_rng_seed(0)
    # a finite hot end: rank 1's rung is explored (a prior rung would build no explorer)
    kernel = ParallelTempering(model, num_replicas=2, max_temperature=10.0,
                               explorer=explorer if where == "explorer" else "rwmh")
    MCMC(kernel, 5, 2, disable_progbar=True).run(*linear_data())
    return "finished"


def run_rank_dependent_ladder():
    """Rank 1 asks for a hotter ladder than rank 0: same model, different kernels."""
    pyro.set_rng_seed(0)
    hottest = 20.0 if dist.get_rank() == 1 else 10.0
    kernel = ParallelTempering(linear_model, num_replicas=2, max_temperature=hottest,
                               explorer="rwmh")
    MCMC(kernel, 5, 2, disable_progbar=True).run(*linear_data())
    return "finished"


def run_setup_refusals(scenarios):
    """
    Run each of ``scenarios`` (names of :data:`SETUP_REFUSALS`) in turn on one process group;
    returns {name: "finished" or this rank's error dict}. Each refusal is raised by every rank
    after the same single set-up all-gather, so the group stays in step for the next one: one
    spawn (whose process start-up dominates) serves all of them.
    """
    out = {}
    for name in scenarios:
        fn, args = SETUP_REFUSALS[name]
        try:
            out[name] = fn(*args)
        except Exception as error:
            out[name] = {"error": type(error).__name__, "message": str(error)}
    return out


SETUP_REFUSALS = {
    "models": (run_rank_dependent_data, ()),
    "ladders": (run_rank_dependent_ladder, ()),
    "model": (run_failing_on_rank_1, ("model",)),
    "explorer": (run_failing_on_rank_1, ("explorer",)),
    # last: MCMC(num_chains=2) may start Pyro's own chain processes
    "num_chains": (run_kernel, ({"num_replicas": 2, "explorer": "rwmh"}, {"num_chains": 2})),
}


def run_linear_switching(kernel_kwargs):
    """:func:`run_linear` with compile="auto" switching at the second warmup round's end (scan
    12; give ``warmup_steps`` over 12) to an Inductor that fails (TorchScript recompiles the
    graph): the switch's collective and its re-evaluation of the states on every rank, without a
    real compilation."""
    from pyro_pt import autocompile
    from pyro_pt.potential import compiled

    tries = []

    def refuse(gm, *example):
        tries.append(gm)
        raise RuntimeError("Inductor is not available here")

    compiled.inductor_compile = refuse
    compiled.missing_apis = autocompile.missing_apis = lambda: None
    autocompile.expected_seconds = lambda *args: (0.0, "measured")
    autocompile.record = lambda *args: None
    return run_linear(kernel_kwargs), len(tries)

"""Explorers: the local moves of the rungs, behind one written contract.

The contract is :mod:`pyro_pt.explorers.contract` (what a step receives and returns, how the
log-likelihood is reported, groups); a Pyro kernel is a group of one. The implementations:

- :mod:`~pyro_pt.explorers.pyro_kernels`: Pyro's NUTS, or a user's kernel, per rung;
- :mod:`~pyro_pt.explorers.rwmh`: random-walk Metropolis (a Pyro ``MCMCKernel``);
- :mod:`~pyro_pt.explorers.prior`: the prior rung, exact draws;
- :mod:`~pyro_pt.explorers.hmc_group`: ``explorer="hmc"``, the tempered rungs of a process as
  one group over a batched HMC (:mod:`~pyro_pt.explorers.hmc`, its dynamics
  :mod:`~pyro_pt.explorers.hmc_dynamics`, warmup :mod:`~pyro_pt.explorers.hmc_warmup` and
  record :mod:`~pyro_pt.explorers.hmc_record`).

This module builds the rungs one process holds (:func:`build_rungs`) and steps them
(:func:`step_rungs`). Every rung starts from its own draw of ``init_strategy`` (or the user's
``initial_params``), drawn with its own random stream, so the start does not depend on where
the rung runs. The prior rung (beta = 0) draws exactly from the prior.
"""

from ..explain import fallback_reason
from ..potential import FunctionalSplit, TemperedPotential
from ..random import RandomStream
from ..reference.split import ReferencedSplit
from .contract import ExplorerGroup, RungExplorer, SingleRungExplorer
from .hmc_group import HMCGroup, check_hmc_options
from .prior import PriorExplorer
from .pyro_kernels import EXPLORERS, PyroKernelExplorer, make_kernel
from .rwmh import RandomWalkMetropolis

__all__ = ["EXPLORERS", "ExplorerGroup", "HMCGroup", "PriorExplorer", "PyroKernelExplorer",
           "RandomWalkMetropolis", "RungExplorer", "SingleRungExplorer", "build_rungs",
           "check_hmc_options", "engine_info", "make_kernel", "step_rungs"]


def step_rungs(explorers, states):
    """
    One local move of every rung of a block: ``[(z, ll), ...]`` in rung order. Each group
    moves once, all its rungs in one call.
    """
    out = [None] * len(explorers)
    groups = {}
    for i, explorer in enumerate(explorers):
        groups.setdefault(id(explorer.group), (explorer.group, []))[1].append(i)
    for group, indices in groups.values():
        for i, result in zip(indices, group.step([states[i] for i in indices])):
            out[i] = result
    return out


def _start(split, stream, initial_params):
    if initial_params is not None:
        return {name: v.detach().clone() for name, v in initial_params.items()}
    with stream:
        return split.initial_point()


def engine_info(fast, group=None):
    """What runs the model's graph, and for a batched HMC ``group`` its leapfrog steps, with
    why not the faster path (``explorer_info``'s keys); builds the group's steps."""
    compiled = fast.compiled
    info = dict(potential=fast.path, potential_reason=fallback_reason(fast.reason),
                potential_engine=compiled.engine, potential_engine_reason=compiled.engine_reason)
    matmul = compiled.matmul_path()
    if matmul:  # under Inductor only
        info["potential_matmul"] = matmul
    if isinstance(group, HMCGroup):
        split = group.fast  # the fast split, or a reference's split over it
        leapfrog = group.engine.leapfrog  # compiles the fused or lockstep step now
        info.update(batched=split.batched.path, batched_reason=split.batched.reason)
        info.update(leapfrog=leapfrog, leapfrog_reason="" if leapfrog == "lockstep" else (
            f"not lockstep: {split.lockstep.reason}" if leapfrog == "fused" else (
                split.fused.reason
                or f"potential {split.path!r}, replicas evaluated by {split.batched.path!r}")))
    return info


def build_rungs(split, rungs, betas, seeds, device, explorer, explorer_kwargs, warmup_steps,
                initial_params=None, starts=None, reference=None, referenced=None):
    """
    The explorers, initial states and initial log-likelihoods of ``rungs`` (rung indices).
    ``split`` is the model's :class:`~pyro_pt.potential.FunctionalSplit` (its captured graphs,
    the kernel's), or its :class:`~pyro_pt.potential.ModelSplit` where no rung is tempered.
    ``seeds`` and ``betas`` are indexed by rung; ``starts`` (rung -> state) gives some rungs
    their initial state instead of ``initial_params`` or a draw (rungs added to a ladder,
    :mod:`pyro_pt.growth`). ``reference`` (a
    :class:`~pyro_pt.reference.GaussianReference`, None for the prior) is what the beta = 0
    rung draws and every rung's target leans towards (:mod:`pyro_pt.reference.split`); with
    ``referenced`` (a range of rungs: the reference's leg of a stabilized ladder,
    :mod:`pyro_pt.legs`) only those rungs, the others the prior's (a batched HMC group each).

    :returns: ``(explorers, states, log_likelihoods, info)``; ``info`` says which explorer and
        which potential path (fast functional graph or Pyro's trace) the rungs use, and why.
    """
    explorers, states, lls = [], [], []
    info = {"explorer": explorer if isinstance(explorer, str) else "callable"}
    tempered = any(betas[k] > 0.0 for k in rungs)
    if tempered:
        # Every explorer evaluates the model through its captured graph where that is exact.
        if not isinstance(split, FunctionalSplit):
            split = FunctionalSplit(split)
        fast = split
        info.update(engine_info(fast))
        if split.reason:
            info["potential_detail"] = split.reason  # the capture's own message
    # each rung's split: against the reference (one for all such rungs, so that they form one
    # batched HMC group), or (the prior's leg) the model's own
    against_q = split if reference is None else ReferencedSplit(split, reference)
    splits = {k: against_q if referenced is None or k in referenced else split for k in rungs}
    groups = {}  # id(split) -> the batched HMC group of the rungs on it
    for k in rungs:
        stream = RandomStream(seeds[k], device=device)
        rung_split = splits[k]
        if betas[k] == 0.0:
            rung = PriorExplorer(stream, rung_split)
            z, ll = rung.move(None)
        elif explorer == "hmc":
            if id(rung_split) not in groups:
                groups[id(rung_split)] = HMCGroup(rung_split, explorer_kwargs)
            group = groups[id(rung_split)]
            z = _start(rung_split, stream, (starts or {}).get(k, initial_params))
            rung, ll = group.add(betas[k], seeds[k], z), None
            info["explorer"] = "hmc (batched)"
        else:
            potential = TemperedPotential(rung_split, betas[k])
            kernel = make_kernel(explorer, potential, explorer_kwargs)
            rung = PyroKernelExplorer(kernel, stream, potential)
            z = _start(rung_split, stream, (starts or {}).get(k, initial_params))
            rung.setup(z, warmup_steps)
            ll = rung_split.log_likelihood(z)
        explorers.append(rung)
        states.append(z)
        lls.append(ll)
    started = {id(group): iter(group.setup(warmup_steps)) for group in groups.values()}
    lls = [next(started[id(rung.group)]) if ll is None else ll
           for rung, ll in zip(explorers, lls)]
    # Compiles the fused steps now, in the set-up, rather than at the first leapfrog; the
    # info is the first group's (against the reference, where there is one).
    for group in reversed(list(groups.values())):
        info.update(engine_info(fast, group))
    return explorers, states, lls, info

"""Explorers: the local moves of the rungs, behind one written contract
(:mod:`~pyro_pt.explorers.contract`); the kinds ``explorer=`` names are in
:mod:`~pyro_pt.explorers.registry`, the modules in docs/layout.md.

This module builds the rungs one process holds (:func:`build_rungs`) and steps them
(:func:`step_rungs`). Every rung starts from its own draw of ``init_strategy`` (or the user's
``initial_params``), drawn with its own random stream, so the start does not depend on where
the rung runs.
"""

from ..explain import fallback_reason
from ..potential import FunctionalSplit
from ..reference.split import ReferencedSplit
from .contract import ExplorerGroup, ExplorerKind, Rung, RungExplorer, SingleRungExplorer
from .hmc_group import HMCGroup
from .prior import PriorExplorer
from .pyro_kernels import PyroKernelExplorer, make_kernel
from .registry import kind_of, names
from .rwmh import RandomWalkMetropolis

__all__ = ["ExplorerGroup", "ExplorerKind", "HMCGroup", "PriorExplorer", "PyroKernelExplorer",
           "RandomWalkMetropolis", "Rung", "RungExplorer", "SingleRungExplorer", "build_rungs",
           "by_group", "check_explorer", "engine_info", "kind_of", "make_kernel", "names",
           "step_rungs"]


def check_explorer(explorer, explorer_kwargs):
    """Refuse an ``explorer`` no kind answers to, or ``explorer_kwargs`` its kind does not take."""
    kind = kind_of(explorer)
    if kind.check is not None:
        kind.check(explorer_kwargs or {})


def step_rungs(explorers, states):
    """One local move of every rung of a block, each group in one call: ``[(z, ll), ...]``."""
    out = [None] * len(explorers)
    for group, indices in by_group(explorers):
        for i, result in zip(indices, group.step([states[i] for i in indices])):
            out[i] = result
    return out


def _start(split, stream, initial_params):
    if initial_params is not None:
        return {name: v.detach().clone() for name, v in initial_params.items()}
    with stream:
        return split.initial_point()


def engine_info(fast, group=None):
    """``explorer_info``'s keys: what runs the model's graph, and for a ``group`` its steps,
    with why not the faster path."""
    compiled = fast.compiled
    info = dict(potential=fast.path, potential_reason=fallback_reason(fast.reason),
                potential_engine=compiled.engine, potential_engine_reason=compiled.engine_reason)
    matmul = compiled.matmul_path()
    if matmul:  # under Inductor only
        info["potential_matmul"] = matmul
    if group is not None:
        info.update(group.engine_info())
    return info


def by_group(explorers):
    """``[(group, [indices of its members]), ...]`` of a block's ``explorers``, in the order
    of each group's first member."""
    groups = {}
    for i, explorer in enumerate(explorers):
        groups.setdefault(id(explorer.group), (explorer.group, []))[1].append(i)
    return list(groups.values())


def build_rungs(split, rungs, betas, seeds, device, explorer, explorer_kwargs, warmup_steps,
                initial_params=None, starts=None, reference=None, referenced=None):
    """
    ``(explorers, states, log_likelihoods, info)`` of ``rungs`` (rung indices; ``betas`` and
    ``seeds`` are indexed by rung), ``info`` saying which explorer and potential path the rungs
    use, and why. ``split`` is the model's :class:`~pyro_pt.potential.FunctionalSplit` (the
    kernel's captured graphs), or its :class:`~pyro_pt.potential.ModelSplit` where no rung is
    tempered. ``starts`` (rung -> state) gives some rungs their initial state (rungs added to a
    ladder, :mod:`pyro_pt.growth`). ``reference`` (a
    :class:`~pyro_pt.reference.GaussianReference`, None for the prior) is what the beta = 0
    rung draws and the targets lean towards; with ``referenced`` (the reference's leg of a
    stabilized ladder, a range of rungs) only those rungs', the others the prior's (a group
    each). A tempered rung is built by its kind's factory, the beta = 0 rung by
    :class:`PriorExplorer`; then every group is set up once from its members' starts.
    """
    kind = kind_of(explorer)
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
    # group), or (the prior's leg) the model's own
    against_q = split if reference is None else ReferencedSplit(split, reference)
    splits = {k: against_q if referenced is None or k in referenced else split for k in rungs}
    groups = {}  # the block's groups, by kind and split (Rung.group)
    explorers, starts_of = [], []
    for k in rungs:
        rung = Rung(splits[k], betas[k], seeds[k], device, explorer_kwargs, explorer, groups)
        if betas[k] == 0.0:
            explorers.append(PriorExplorer(rung.stream, rung.split))
            starts_of.append(None)
            if isinstance(rung.split, FunctionalSplit):  # the prior's own (not q's) draws
                prior = rung.split.prior
                info["prior_draws"] = prior.path
                if prior.reason:
                    info["prior_draws_reason"] = prior.reason
            continue
        explorers.append(kind.build(rung))
        starts_of.append(_start(rung.split, rung.stream, (starts or {}).get(k, initial_params)))
        info["explorer"] = kind.title
    states, lls = [None] * len(explorers), [None] * len(explorers)
    for group, members in by_group(explorers):
        started = group.setup([starts_of[i] for i in members], warmup_steps)
        for i, (z, ll) in zip(members, started):
            states[i], lls[i] = z, ll
    # Compiles the fused steps now, in the set-up, rather than at the first leapfrog; the
    # info is the first group's (against the reference, where there is one).
    for group in reversed(list(groups.values())):
        info.update(engine_info(fast, group))
    return explorers, states, lls, info

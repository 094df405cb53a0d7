"""Build the explorers of the rungs one process holds, and their starting states.

Every rung starts from its own draw of ``init_strategy`` (or the user's ``initial_params``),
drawn with its own random stream, so the start does not depend on where the rung runs. The
prior rung (beta = 0) draws exactly from the prior. ``explorer="hmc"`` puts the other rungs
into one batched HMC group; any other explorer gets a Pyro kernel per rung.
"""

from .batched_explorer import BatchedRungs
from .explorers import Explorer, PriorExplorer, RandomStream, make_kernel
from .potential import FunctionalSplit, TemperedPotential


def _start(split, stream, initial_params):
    if initial_params is not None:
        return {name: v.detach().clone() for name, v in initial_params.items()}
    with stream:
        return split.initial_point()


def build_rungs(split, rungs, betas, seeds, device, explorer, explorer_kwargs, warmup_steps,
                initial_params=None):
    """
    The explorers, initial states and initial log-likelihoods of ``rungs`` (rung indices).

    :returns: ``(explorers, states, log_likelihoods, info)``; ``info`` says which explorer and
        which potential path (fast functional graph or Pyro's trace) the rungs use, and why.
    """
    explorers, states, lls = [], [], []
    group = None
    info = {"explorer": explorer if isinstance(explorer, str) else "callable"}
    if any(betas[k] > 0.0 for k in rungs):
        # Every explorer evaluates the model through its captured graph where that is exact.
        split = FunctionalSplit(split)
        info.update(potential=split.path, potential_reason=split.reason)
        if explorer == "hmc":
            group = BatchedRungs(split, explorer_kwargs)
            info.update(explorer="hmc (batched)", batched=split.batched_path,
                        batched_reason=split.batched_reason)
    for k in rungs:
        stream = RandomStream(seeds[k], device=device)
        if betas[k] == 0.0:
            rung = PriorExplorer(stream, split)
            z, ll = rung.step(None)
        elif group is not None:
            z = _start(split, stream, initial_params)
            rung, ll = group.add(betas[k], seeds[k], z), None
        else:
            potential = TemperedPotential(split, betas[k])
            rung = Explorer(make_kernel(explorer, potential, explorer_kwargs), stream, potential)
            z = _start(split, stream, initial_params)
            rung.setup(z, warmup_steps)
            ll = split.log_likelihood(z)
        explorers.append(rung)
        states.append(z)
        lls.append(ll)
    if group is not None:
        started = iter(group.setup(warmup_steps))
        lls = [next(started) if ll is None else ll for ll in lls]
    return explorers, states, lls, info

"""The block of rungs one process holds, its set-up, and the moves of states between processes."""

import warnings

import torch

from .comm import agree_on_setup, rung_blocks
from .explain import model_errors, refuse_random_subsampling
from .explorers import build_rungs, step_rungs
from .fingerprint import check_same_model
from .health import TemperingWarning
from .ladder import Ladder, geometric_ladder
from .options import FALLBACK_MAX_TEMPERATURE, check_split, shared_settings
from .potential import FlatLayout, FunctionalSplit, ModelSplit, torch_compat
from .potential.layout import same_values
from .random import reference_seed, stream_seeds
from .reference import is_prior, make_reference
from .reference.stabilized import stabilize


class RungBlock:
    """
    This rank's contiguous block of rungs: their explorers and current states.

    Rung ``k``'s explorer lives on the rank that owns ``k`` for the whole run; states move
    between rungs (and so between ranks) on accepted swaps. Every rank keeps the K
    log-likelihoods, all-gathered after each local round.

    :param comm: a :class:`~pyro_pt.comm.LocalComm` or :class:`~pyro_pt.comm.TorchComm`.
    :param int num_rungs: K.
    :param list names: latent site names, sorted (the flattening order).
    """

    def __init__(self, comm, num_rungs, names):
        self.comm = comm
        self.blocks = rung_blocks(num_rungs, comm.world_size)
        self.start, self.stop = self.blocks[comm.rank]
        self.owner = [r for r, (a, b) in enumerate(self.blocks) for _ in range(a, b)]
        self.names = names
        self.explorers, self.states = [], []
        self._cache = (None, None)

    @property
    def rungs(self):
        return range(self.start, self.stop)

    def add(self, explorer, state):
        self.explorers.append(explorer)
        self.states.append(state)

    def _flat(self, z):
        return FlatLayout.of(z, self.names).flatten(z)

    def _unflat(self, flat, like):
        return FlatLayout.of(like, self.names).unflatten(flat)

    def explore(self):
        """
        One local move of every rung of the block (:func:`~pyro_pt.explorers.step_rungs`):
        returns the new states' log-likelihoods and whether rung 0's explorer moved (for RWMH
        and HMC: it accepted; None on ranks without rung 0).
        """
        stepped = step_rungs(self.explorers, self.states)
        cold_moved = None
        if self.start == 0:
            before, after = self.states[0], stepped[0][0]
            cold_moved = not same_values(before, after)
        self.states = [z for z, _ in stepped]
        return [ll for _, ll in stepped], cold_moved

    def gather(self, local_values):
        """The K values of all rungs from each rank's values for its own rungs."""
        sizes = [b - a for a, b in self.blocks]
        return self.comm.all_gather_floats(local_values, sizes)

    def permute(self, origin):
        """
        After a swap round rung ``k`` holds the state that was at rung ``origin[k]``: move the
        states (point-to-point across ranks) and invalidate the explorers' caches.
        """
        old = list(self.states)
        like = old[0]
        sends, receives = [], []
        for k in self.rungs:
            src = origin[k]
            if src == k:
                continue
            if self.start <= src < self.stop:
                self.states[k - self.start] = old[src - self.start]
            else:
                receives.append((self.owner[src], k, torch.empty_like(self._flat(like))))
            self.explorers[k - self.start].replace_state()
        for k, src in enumerate(origin):
            if self.start <= src < self.stop and not self.start <= k < self.stop:
                sends.append((self.owner[k], self._flat(old[src - self.start])))
        # Each (src, dst) rank pair exchanges states in rung order, so messages match up.
        self.comm.exchange(sends, [(rank, buf) for rank, _, buf in receives])
        for _, k, buf in receives:
            self.states[k - self.start] = self._unflat(buf, like)

    def cold_state(self):
        """Rung 0's state on every rank (broadcast from its owner)."""
        if self.comm.world_size == 1:
            return dict(self.states[0])
        like = self.states[0]
        flat = self._flat(like) if self.start == 0 else torch.empty_like(self._flat(like))
        return self._unflat(self.comm.broadcast(flat, src=0), like)

    def diagnostics(self):
        """Every rung's explorer diagnostics, in rung order, on every rank."""
        mine = [explorer.diagnostics() for explorer in self.explorers]
        gathered = self.comm.all_gather_object(mine)
        return [d for block in gathered for d in block]

    def summary(self, scan, temperatures):
        """
        The rungs' part of the kernel's diagnostics after ``scan`` scans. Gathering them is a
        collective; after the run's own call (on every rank, by MCMC) a later call on one rank
        alone, e.g. for a plot, reuses it.
        """
        if self._cache[0] != scan:
            self._cache = (scan, self.diagnostics())
        per_rung = self._cache[1]
        return {
            "divergences": list(per_rung[0]["divergences"]),
            "acceptance rate": per_rung[0]["acceptance rate"],
            "temperatures": temperatures,
            "local_acceptance": [d["acceptance rate"] for d in per_rung],
            "divergences_per_temperature": [len(d["divergences"]) for d in per_rung],
            # Where warmup raised a rung's target acceptance after divergences (batched HMC).
            "raised_target_accept_probs": [d.get("target accept prob") for d in per_rung],
        }


def set_up_rungs(comm, num_rungs, make_split, build, settings):
    """
    The model's split, this rank's block of rungs and the run's seeds, agreed on by all ranks.

    Every rank joins the set-up's collectives (the seeds' broadcast, the final check) even when
    its own part failed, so that a failure on one rank (a model that raises on its data, rungs
    that find no valid start, memory) stops every rank with the reason instead of leaving the
    others waiting for the backend's timeout.

    :param callable make_split: ``() -> ModelSplit``.
    :param callable build: ``(split, rungs, seeds) -> (explorers, states, lls, info)``.
    :param dict settings: what every rank must agree on (see
        :func:`~pyro_pt.comm.agree_on_setup`).
    :returns: ``(block, split, local log-likelihoods, info, seeds)``.
    """
    failure = split = block = None
    lls = info = None
    try:
        split = make_split()
    except Exception as error:
        failure = error
    # One base seed from the global generator (so pyro.set_rng_seed governs the run), the same
    # on every rank; the streams are spawned from it (pyro_pt.random).
    base = torch.randint(0, 2**62, (1,), dtype=torch.int64)
    base = int(comm.broadcast(base, src=0, what="broadcast of the seeds").item())
    seeds = stream_seeds(base, num_rungs)
    if failure is None:
        try:
            block = RungBlock(comm, num_rungs, split.latent_names)
            block.base_seed = base  # rungs added later spawn theirs from it (pyro_pt.growth)
            explorers, states, lls, info = build(split, block.rungs, seeds)
            for explorer, z in zip(explorers, states):
                block.add(explorer, z)
        except Exception as error:
            failure = error
    view = None
    if failure is None:
        view = [(name, tuple(block.states[0][name].shape)) for name in split.latent_names]
    agree_on_setup(comm, failure, view, settings)
    return block, split, lls, info, seeds


def default_hot_end_refusal(kernel, split, betas):
    """Why the default ladder's exact prior rung cannot be drawn for this model (the site and
    its reason), or None where it can or was not the default."""
    if not (kernel._exact_hot_end_default and is_prior(kernel.reference) and betas[-1] == 0.0):
        return None
    return split.prior_refusal()


def finite_hot_end(kernel, why, rank=0):
    """Where the prior cannot be drawn exactly (``why`` names the site): ``kernel``'s ladder
    becomes the geometric one to T = 50, said at the first set-up, on rank 0 (as the review is).
    Returns its betas."""
    kernel._ladder = Ladder(geometric_ladder(kernel.num_replicas, FALLBACK_MAX_TEMPERATURE))
    if rank == 0:
        warnings.warn(
            f"ParallelTempering: the default hottest rung is the prior, drawn exactly, but "
            f"{why}. Falling back to a finite hottest temperature T = "
            f"{FALLBACK_MAX_TEMPERATURE:g}: an MCMC chain that may not cross between modes, "
            "so the cold chain's mode weights rest on it and tempered restarts are not "
            "counted. Give the site a proper, unscaled prior for an exact hot end, or pass "
            "max_temperature= (or temperatures=) to choose the hot end yourself",
            TemperingWarning, stacklevel=4)
    return kernel.betas


def set_up_kernel(kernel, comm, warmup_steps, args, kwargs):
    """
    :func:`set_up_rungs` for a :class:`~pyro_pt.ParallelTempering` ``kernel`` and the model call
    ``(args, kwargs)``: the split and the explorers of its settings, with errors that name the
    model's site (:mod:`pyro_pt.explain`).
    """
    betas = kernel.betas
    legs = {}

    def make_split():
        nonlocal betas
        with model_errors(kernel.model, args, kwargs):
            split = ModelSplit(kernel.model, args, kwargs, kernel._user_transforms,
                               init_strategy=kernel.init_strategy)
        refuse_random_subsampling(split)  # before anything runs on a changing log density
        if not is_prior(kernel.reference):  # two legs, to q and to the prior, where allowed
            legs["info"] = stabilize(kernel, split)
            betas = kernel.betas
        why = default_hot_end_refusal(kernel, split, betas)
        if why is not None:
            betas = finite_hot_end(kernel, why, comm.rank)
        check_split(split, betas, kernel._save_params, kernel.reference)
        if kernel._resume_from:  # before any rung is built: the checkpoint's model and data
            check_same_model(*kernel._resume_from, split)
        return split

    def build(split, rungs, seeds):
        with model_errors(kernel.model, args, kwargs, split):
            # q's first prior draws take the stream after the swaps' (the same on every rank)
            kernel._reference = make_reference(kernel.reference, split,
                                               reference_seed(seeds[-1]), kernel._user_transforms)
            # the private APIs (pyro_pt.potential.torch_compat) the set-up found missing, and why
            with torch_compat.recording() as missing:
                # the captured graphs, the kernel's: compile="auto" recompiles them
                # (pyro_pt.autocompile), a growing ladder's new rungs reuse them
                kernel._fast = (FunctionalSplit(split, compile=kernel.compile)
                                if any(betas[k] > 0.0 for k in rungs) else None)
                ladder_legs = kernel._ladder.legs
                built = build_rungs(kernel._fast or split, rungs, betas, seeds, split.device,
                                    kernel.explorer, kernel.explorer_kwargs, warmup_steps,
                                    kernel._user_initial_params, reference=kernel._reference,
                                    referenced=ladder_legs and range(*ladder_legs.spans[0]))
            if missing:
                built[3]["private_api"] = missing
            if legs.get("info"):
                built[3]["legs"] = legs["info"]
            return built

    return set_up_rungs(comm, len(betas), make_split, build, shared_settings(kernel, warmup_steps))

r"""
``num_replicas="auto"``: a ladder that grows during warmup until it has the rungs its
communication barrier calls for (about :math:`2\Lambda`, Syed et al. 2021, Sec. 5.3;
:func:`~pyro_pt.barrier.recommended_replicas`), known only once the chains have run.

What, when and at what cost: docs/design.md, "Growing the ladder". In short: at the ends of
:func:`growth_round_ends`, where :math:`\lceil 2\Lambda \rceil > K`, the ladder grows to
:math:`K' = \min(\lceil 2\Lambda \rceil, \text{max\_replicas})` rungs at equal increments
of the estimated cumulative barrier (:func:`~pyro_pt.ladder.equal_barrier_betas`); it never
shrinks. The K existing rungs keep their explorers and states and move to the new rung nearest
their barrier position (:func:`positions`); each new rung starts from the state of the nearest
colder one, with an explorer built on the run's captured graph for the warmup that remains
and the stream :func:`~pyro_pt.random.grown_seed` of its birth index (the starting ladder's
rungs are births 0 .. K-1), so no rung's seed depends on K. The swap statistics, lineages and
ll record restart with the new K (round trips so far are kept in the total);
``adaptation_history`` marks the round with ``"grown_to"``: K'. Give an ``"auto"`` run a
warmup of 1000 scans or more: the new rungs adapt only in the warmup left (about half).

One process only: over several ranks the rungs' blocks are fixed at set-up, so an explicit
``"auto"`` (or ``max_replicas``) is refused and the default keeps its 8 rungs. A run resumed
from a checkpoint written before its growth rounds goes on growing as the uninterrupted run
would.
"""

import torch

from .barrier import cumulative_barrier, recommended_replicas
from .checkpoint_state import capture, restore
from .explorers import build_rungs
from .ladder import (GROWTH_ROUNDS, equal_barrier_betas, inverse_temperatures,
                     settled_round_ends)
from .options import DEFAULT_NUM_REPLICAS
from .random import grown_seed, ladder_seed
from .recorders import TemperingRecorder
from .rungs import RungBlock

AUTO = "auto"
DEFAULT_MAX_REPLICAS = 32


def growth_round_ends(warmup_steps, swap_interval=1):
    """The warmup round ends at which the ladder may grow: the last :data:`GROWTH_ROUNDS` (2)
    whose round holds at least :data:`MIN_GROWTH_SCANS` scans (earlier ones see the chains'
    transient). The first leaves a round to re-place the grown ladder, the second a second
    chance with its better estimate, and the warmup after it for the new rungs to adapt."""
    return set(settled_round_ends(warmup_steps, swap_interval)[-GROWTH_ROUNDS:])


def growth_options(num_replicas, max_replicas, temperatures, adapt_temperatures):
    """
    ``(num_replicas for the starting ladder, max_replicas or None)`` from the constructor's
    arguments: ``num_replicas="auto"`` starts at the default ladder (or ``temperatures``)
    and grows up to ``max_replicas`` (default :data:`DEFAULT_MAX_REPLICAS`); without
    ``"auto"``, ``max_replicas`` must be left out.
    """
    if isinstance(num_replicas, str) and num_replicas != AUTO:
        raise ValueError(f"num_replicas must be an int or 'auto' (lower case), got "
                         f"{num_replicas!r}")
    if num_replicas != AUTO:
        if max_replicas is not None:
            raise ValueError(f"max_replicas={max_replicas!r} caps a growing ladder: give it "
                             "with num_replicas='auto', or leave it out")
        return num_replicas, None
    if max_replicas is None:
        max_replicas = DEFAULT_MAX_REPLICAS
    if isinstance(max_replicas, bool) or not isinstance(max_replicas, int):
        raise TypeError(f"max_replicas must be an int, got {max_replicas!r}")
    if max_replicas < 2:
        raise ValueError(f"max_replicas must be at least 2 (a cold rung and a hot one), got "
                         f"{max_replicas}")
    if temperatures is not None and len(temperatures) > max_replicas:
        raise ValueError(f"temperatures has {len(temperatures)} rungs, more than "
                         f"max_replicas={max_replicas}: raise max_replicas")
    if adapt_temperatures is not True:
        raise ValueError("num_replicas='auto' grows the ladder at the ends of its warmup "
                         "adaptation rounds: it needs adapt_temperatures=True")
    start = None if temperatures is not None else min(DEFAULT_NUM_REPLICAS, max_replicas)
    return start, max_replicas


def positions(cumulative, num_rungs):
    """Where each of the K existing rungs goes in a ladder of ``num_rungs`` rungs, from their
    ``cumulative`` barrier: the index nearest its barrier position, strictly increasing, cold
    first and hottest last."""
    num, total = len(cumulative), cumulative[-1]
    out = [0]
    for i in range(1, num - 1):
        want = round((num_rungs - 1) * cumulative[i] / total) if total > 0 else i
        out.append(min(max(want, out[-1] + 1), num_rungs - num + i))
    return out + [num_rungs - 1]


class Growth:
    """
    The growth of a run's ladder (``num_replicas="auto"``, in one process): :meth:`grow` at
    the end of each warmup round, up to ``max_replicas`` rungs; an ensemble's ladders
    (:mod:`pyro_pt.ensemble`) grow together.

    :param int start: the number of rungs of the starting ladder (the next birth index).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("births", "base_seed")
    REBUILT = ("max_replicas", "warmup_steps", "growth_ends")

    def __init__(self, max_replicas, comm, warmup_steps, start, swap_interval=1):
        if comm.world_size > 1:
            raise ValueError(
                f"num_replicas='auto' grows the ladder in one process, but this run has "
                f"{comm.world_size} ranks, whose blocks of rungs are fixed at set-up: run it "
                "once in one process and give the num_replicas it grew to (see "
                "kernel.adaptation_history), or a fixed num_replicas")
        self.max_replicas = max_replicas
        self.warmup_steps = warmup_steps
        self.growth_ends = growth_round_ends(warmup_steps, swap_interval)
        self.births = start
        self.base_seed = None  # the run's (pyro_pt.random), set with its rungs

    def state_dict(self):
        """What a checkpoint keeps (:mod:`pyro_pt.checkpoint`): the seed of the next rung."""
        return capture(self)

    def load_state_dict(self, state, run=None):
        restore(self, state, torch.device("cpu"))

    def grow(self, runs):
        """After the ladder's adaptation at a warmup round end: grow the ladder ``runs`` share
        (one, or an ensemble's, :mod:`pyro_pt.ensemble`, whose records the barrier pooled),
        with every run's rungs and recorder, where the round's barrier calls for more. Returns
        whether it grew (the rungs then have their new betas)."""
        first = runs[0]
        if first.ladder.legs is not None:  # q's leg joined (pyro_pt.reference.joining)
            return False
        scan = first.scans
        entry = first.ladder.history[-1]
        old_betas = inverse_temperatures(entry["temperatures"])
        num = min(self.max_replicas, recommended_replicas(entry["barrier"]))
        if num <= len(old_betas) or scan not in self.growth_ends:
            return False
        pairs = entry["pair_barriers"]
        betas = list(equal_barrier_betas(old_betas, pairs, num))
        first.ladder.betas = list(betas)  # K = len(ladder.betas) again, for every run
        entry["grown_to"] = num
        place = positions(cumulative_barrier(pairs), num)
        new = [j for j in range(num) if j not in place]
        # A new rung starts where the nearest colder existing rung is: a colder state lies where
        # the hotter, wider target has mass; a hotter one can be far out in its tails.
        nearest = {j: max(i for i, p in enumerate(place) if p < j) for j in new}
        # Every run's new rungs in one call, so that they form one explorer group: run c's
        # rung j is index c * num + j there, seeded from its own base seed.
        bases = [ladder_seed(self.base_seed, c) for c in range(len(runs))]
        seeds, starts = {}, {}
        for c, run in enumerate(runs):
            for n, j in enumerate(new):
                seeds[c * num + j] = grown_seed(bases[c], self.births + n)
                starts[c * num + j] = run.rungs.states[nearest[j]]
        self.births += len(new)
        options = first.options
        built = build_rungs(first.fast or first.split, sorted(seeds), betas * len(runs), seeds,
                            first.split.device, options.explorer, options.explorer_kwargs,
                            self.warmup_steps - scan, reference=first.reference, starts=starts)
        for c, run in enumerate(runs):
            part = slice(c * len(new), (c + 1) * len(new))
            self._install(run, betas, place, dict(zip(new, zip(*(b[part] for b in built[:3])))))
        return True

    def _install(self, run, betas, place, added):
        """``run``'s grown block of rungs: its old rungs at ``place``, the ``added`` ones (rung
        -> (explorer, state, ll)) between them; its records begin again with the new K."""
        old, num = run.rungs, len(betas)
        block = RungBlock(old.comm, num, old.names, old.kind)
        lls = []
        for j in range(num):
            if j in added:
                explorer, state, ll = added[j]
            else:
                i = place.index(j)
                explorer, state, ll = old.explorers[i], old.states[i], run.ll[i]
                if betas[j] != explorer.beta:
                    explorer.set_beta(betas[j])
            block.add(explorer, state)
            lls.append(ll)
        run.rungs, run.ll = block, lls
        run.recorder = TemperingRecorder.begun_again(run.recorder, num,
                                                     exact_hots=run.ladder.exact_hots)

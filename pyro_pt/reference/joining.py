r"""``reference="auto"`` (the default): the prior alone, until warmup's cold draws show
separated modes; then a leg from the posterior to a Gaussian mixture q fitted to those draws
(:mod:`~pyro_pt.reference.mixture`) joins the ladder at its cold end, and the run goes on as
the stabilized two-leg run (:mod:`~pyro_pt.reference.stabilized`), the prior's leg kept.

Why: on a multimodal posterior the mixture's leg is short (the two-component mixture of
``benchmarks/vs_tempering.py``: barrier 0.35 from the widened mixture against 6.2 from the
prior, ``benchmarks/reference_barrier.py``) and a default run makes 8 times the tempered
restarts (2883-3148 against 351-371 in 1000 + 1000 scans, ``benchmarks/ensemble.py
--defaults``); on a unimodal one the second leg buys nothing and costs a third to a half of
the effective draws per second (GLM, hierarchy, logistic, classifier: 0.5-0.8 times), and set-up
cannot tell the two apart. The cold draws can: q is fitted to them at each warmup round's end
(:class:`~pyro_pt.reference.refit.Refitting`), and where two of its components are separated
by a valley (:func:`separated`) the modes are real.

When: at the end of a warmup round of at least
:data:`~pyro_pt.ladder.MIN_GROWTH_SCANS` scans (shorter ones hold the chains' transient), so
that about half the warmup is left for the new leg to adapt. The leg has :data:`LEG_RUNGS`
rungs, equally spaced in beta, each starting at the cold state; the ladder's K rungs become the
prior's leg, unchanged. Its rungs' streams are :func:`~pyro_pt.random.grown_seed` births from
:data:`FIRST_BIRTH` of each ladder's base seed, so no rung's seed depends on K or on when the
leg joined. Once joined the ladder no longer grows (a growing ladder is one leg). One process
only (over several ranks the blocks of rungs are fixed at set-up), a ladder with its prior
rung (not the finite hot end of an improper prior), given by default (no ``temperatures`` or
``max_temperature``), the default swap scheme: else the run stays the prior's, which is what
``reference="prior"`` always runs.
"""

import torch

from ..checkpoint_state import capture, restore
from ..explorers import build_rungs
from ..ladder import Ladder, settled_round_ends, temperatures_of
from ..legs import Legs
from ..random import grown_seed, ladder_seed
from ..recorders import TemperingRecorder
from ..rungs import RungBlock

LEG_RUNGS = 4  # the joined leg's rungs: the mixture's barrier on the battery is 0.35-1
SEPARATION = 1.0  # nats of valley between two components' means that make them two modes
SEGMENT_POINTS = 33  # points on the segment between two means where the valley is looked for
FIRST_BIRTH = 1 << 16  # the joined leg's rungs' births: apart from a growing ladder's


def separated(q):
    r"""Whether two of the mixture ``q``'s components lie on separated modes of its density:
    on the segment between their means :math:`\log q` falls more than :data:`SEPARATION` below
    its lower end (two equal Gaussians of scale s, doubled in variance as q's are, at about
    4.3 s apart; overlapping components fitted to a skewed or heavy-tailed mode have no such
    valley)."""
    means = q.means
    t = torch.linspace(0.0, 1.0, SEGMENT_POINTS, dtype=means.dtype)[:, None]
    for i in range(q.num_components):
        for j in range(i + 1, q.num_components):
            log_q = q.log_prob(means[i] + t * (means[j] - means[i]))
            if float(torch.minimum(log_q[0], log_q[-1]) - log_q.min()) > SEPARATION:
                return True
    return False


def why_not(run, split):
    """Why ``run`` (``reference="auto"``) keeps the prior alone (None: a leg may join)."""
    options = run.options
    if run.comm.world_size > 1:
        return "one process only: over several the blocks of rungs are fixed at set-up"
    if options.ladder_given:
        return "the ladder was given (temperatures or max_temperature)"
    if options.swap_scheme == "sequential":
        return "the sequential sweep would move a state twice across the cold end"
    if run.betas[-1] != 0.0 or split.prior_refusal() is not None:
        return "the hot end is not the prior, drawn exactly"
    return None


class Joining:
    """
    At the ends of warmup rounds: join q's leg to the ladder of ``run`` (every ladder of an
    ensemble) where q's last fit shows separated modes (see the module). ``reference``: q, the
    :class:`~pyro_pt.reference.mixture.MixtureReference` the run's
    :class:`~pyro_pt.reference.refit.Refitting` fits.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("base_seed",)
    REBUILT = ("reference", "warmup_steps", "ends")

    def __init__(self, reference, warmup_steps, swap_interval=1):
        self.reference = reference
        self.warmup_steps = warmup_steps
        self.ends = set(settled_round_ends(warmup_steps, swap_interval))
        self.base_seed = None  # the run's (pyro_pt.random), set with its rungs

    def state_dict(self):
        return capture(self)

    def load_state_dict(self, state, run=None):
        restore(self, state, torch.device("cpu"))

    def end_round(self, run, end):
        """After the round end's other steps (the ladder's adaptation, q's fit): join q's leg
        to every ladder of ``run`` where the fit shows separated modes. Returns whether it
        joined."""
        runs = run.together
        first = runs[0]
        if end.kind == "warmup" and first.ladder.legs is None:  # none joined: say so
            q = self.reference
            first.explorer_info["joining"] = (
                f"none joined: q's fits to warmup's cold draws ({q.num_components} "
                f"component{'s' if q.num_components > 1 else ''} at the last) showed no "
                "separated modes" if q.fits else
                "none joined: q was never fitted (too few cold draws in warmup's rounds)")
        if (end.kind != "warmup round" or end.scan not in self.ends
                or first.ladder.legs is not None or not self.reference.fits
                or not separated(self.reference)):
            return False
        self.join(runs)
        return True

    def join(self, runs):
        """Every ladder of ``runs`` gains q's leg of :data:`LEG_RUNGS` rungs at its cold end:
        its rungs ``0 .. LEG_RUNGS - 1``, the old ones after them."""
        first = runs[0]
        scan, size, history = first.scans, LEG_RUNGS, first.ladder.history
        leg = [1.0 - k / (size - 1) for k in range(size - 1)] + [0.0]
        # a new ladder, every ladder's run's: the kernel's own starts its next run as given
        ladder = Ladder(temperatures_of(leg + first.betas), Legs([size, first.num_replicas]))
        ladder.history = history
        if history and history[-1]["scans"] == scan:
            history[-1]["joined"] = size
        for run in runs:
            run.ladder = ladder
        # every ladder's new rungs in one call, one explorer group against q: ladder c's rung
        # j is index c * size + j there
        seeds, starts = {}, {}
        for c, run in enumerate(runs):
            base = ladder_seed(self.base_seed, c)
            for j in range(size):
                seeds[c * size + j] = grown_seed(base, FIRST_BIRTH + j)
                starts[c * size + j] = run.rungs.states[0]
        options = first.options
        built = build_rungs(first.fast or first.split, sorted(seeds), leg * len(runs), seeds,
                            first.split.device, options.explorer, options.explorer_kwargs,
                            self.warmup_steps - scan, reference=self.reference,
                            referenced=set(seeds), starts=starts)
        for c, run in enumerate(runs):
            part = slice(c * size, (c + 1) * size)
            self._install(run, *(b[part] for b in built[:3]))
        first.explorer_info["legs"] = ladder.legs.describe()
        first.explorer_info["reference"] = self.reference.describe()
        first.explorer_info["joining"] = (f"joined at scan {scan}: q's fit to the cold draws "
                                          "showed separated modes")

    def _install(self, run, explorers, states, lls):
        """``run``'s block of rungs with q's leg (``explorers``, ``states``, ``lls``) before its
        old rungs; its records begin again with the two legs (trips and restarts kept)."""
        old, ladder = run.rungs, run.ladder
        block = RungBlock(old.comm, len(ladder.betas), old.names, old.kind)
        for explorer, state in zip(list(explorers) + old.explorers, list(states) + old.states):
            block.add(explorer, state)
        run.rungs, run.ll = block, list(lls) + list(run.ll)
        run.reference = self.reference
        run.recorder = TemperingRecorder.begun_again(run.recorder, len(ladder.betas),
                                                     ladder.legs, ladder.exact_hots)

"""The set-up of a run: from the kernel's options and the model call to a :class:`~pyro_pt.run.Run`.

In order: the model's split and the checks that need it (random subsampling, the hot end the
prior allows, a stabilized ladder's legs, a resumed run's model and data); the reference; the
captured graphs; this rank's block of rungs (:mod:`pyro_pt.rungs`); the recorder, the report
and the round schedule with its steps (:mod:`pyro_pt.rounds`). Every rank agrees on the set-up
or every rank stops with the reason (:func:`~pyro_pt.comm.agree_on_setup`).
"""

import time
import warnings

import torch

from .autocompile import AutoCompile, record_setup
from .checkpoint import check_same_model
from .comm import agree_on_setup
from .explain import model_errors, refuse_random_subsampling
from .ensemble import num_ladders
from .explorers import build_rungs, kind_of
from .growth import Growth
from .health import TemperingWarning
from .ladder import Ladder, geometric_ladder
from .options import FALLBACK_MAX_TEMPERATURE, check_split, shared_settings
from .potential import FunctionalSplit, ModelSplit, torch_compat
from .random import ladder_seed, reference_seed, stream_seeds
from .recorders import TemperingRecorder
from .reference import is_auto, is_fitted, is_prior, make_reference
from .reference.joining import Joining, why_not
from .reference.refit import Refitting
from .reference.stabilized import stabilize
from .report import Report
from .rounds import LadderAdaptation, ReportRow, RoundSchedule
from .rungs import RungBlock
from .run import Run


def finite_hot_end(run, split):
    """Where the default ladder's exact prior rung cannot be drawn for this model (a site's
    prior is improper, scaled or masked): the run's ladder becomes the geometric one to T = 50,
    said on rank 0 (as the review is)."""
    options = run.options
    if not (options.exact_hot_end_default and is_prior(options.reference)
            and run.betas[-1] == 0.0):
        return
    why = split.prior_refusal()
    if why is None:
        return
    run.ladder = Ladder(geometric_ladder(run.num_replicas, FALLBACK_MAX_TEMPERATURE))
    if run.comm.rank == 0:
        warnings.warn(
            f"ParallelTempering: the default hottest rung is the prior, drawn exactly, but "
            f"{why}. Falling back to a finite hottest temperature T = "
            f"{FALLBACK_MAX_TEMPERATURE:g}: an MCMC chain that may not cross between modes, "
            "so the cold chain's mode weights rest on it and tempered restarts are not "
            "counted. Give the site a proper, unscaled prior for an exact hot end, or pass "
            "max_temperature= (or temperatures=) to choose the hot end yourself",
            TemperingWarning, stacklevel=4)


def _one_leg_to_a_fitted_q(run, legs):
    """Warn where a fitted reference (``"variational"``, ``"mixture"``) runs one leg (no
    ``legs`` on the ladder after :func:`~pyro_pt.reference.stabilized.stabilize`, whose reason
    ``legs`` says): its only hot end is q, fitted to the cold chain's warmup draws, and a mode
    those draws missed is cut off without a sign (on the two-component mixture, a one-leg q
    fitted one mode: share error 0.5, log Z off by log 2, no other warning;
    ``benchmarks/reference.py --defaults``). A guide the user fitted is their
    choice of q, and is not warned of."""
    if (not is_fitted(run.options.reference) or run.resume_from or run.comm.rank != 0
            or run.ladder.legs is not None):
        return
    warnings.warn(
        f"ParallelTempering(reference={run.options.reference!r}) runs {legs}: the only hot end "
        "is q, fitted to the cold chain's warmup draws, so a mode those draws missed is never "
        "proposed and the cold chain's mode weights can be wrong without any other warning. "
        "For mode weights leave the ladder to its default (two legs, to q and to the prior, with "
        "num_replicas of 4 or more and no temperatures or max_temperature), or use the default "
        "reference='prior'", TemperingWarning, stacklevel=5)


def _split(run, args, kwargs):
    """The model's split and the checks that need it, which may give ``run`` another ladder
    (a stabilized one's legs, a finite hot end); returns it and what the legs' info says."""
    options, legs = run.options, None
    with model_errors(options.model, args, kwargs):
        split = ModelSplit(options.model, args, kwargs, options.transforms,
                           init_strategy=options.init_strategy)
    refuse_random_subsampling(split)  # before anything runs on a changing log density
    if not is_prior(options.reference):  # two legs, to q and to the prior, where allowed
        legs = stabilize(run, split)
        _one_leg_to_a_fitted_q(run, legs)
    elif run.ladder.legs is not None:  # "auto", resumed after q's leg joined
        legs = run.ladder.legs.describe()
    finite_hot_end(run, split)
    check_split(split, run.betas, options.save_params, options.reference)
    if run.resume_from:  # before any rung is built: the checkpoint's model and data
        check_same_model(*run.resume_from, split)
    return split, legs


def _build(run, split, legs, base, seeds, args, kwargs):
    """Into ``run.rungs`` (empty): the reference, the captured graphs and this rank's rungs,
    with errors that name the model's site (:mod:`pyro_pt.explain`), from the run's ``base``
    seed and its ``seeds`` (:func:`~pyro_pt.random.stream_seeds`). Returns their lls. With an
    ensemble's other ladders (``run.num_ladders`` > 1, :mod:`pyro_pt.ensemble`)
    their rungs are built in the same call, so that one explorer group holds every ladder's
    tempered rungs; they wait in ``run.followers`` for their runs (:func:`set_up_followers`)."""
    options, betas, rungs = run.options, run.betas, run.rungs.rungs
    num = len(betas)
    swaps = seeds[num]  # the swaps' seed, whose child seeds q's first draws
    mine = len(rungs)  # this rank's rungs of each ladder
    with model_errors(options.model, args, kwargs, split):
        # q's first prior draws take the stream after the swaps' (the same on every rank)
        run.reference = make_reference(options.reference, split, reference_seed(swaps),
                                       options.transforms)
        if is_auto(options.reference):
            _auto(run, split)
        # the private APIs (pyro_pt.potential.torch_compat) the set-up found missing, and why
        with torch_compat.recording() as missing:
            # the captured graphs, the run's: compile="auto" recompiles them
            # (pyro_pt.autocompile), a growing ladder's new rungs reuse them
            # (also on a rank holding only the prior rung: its draws' ll comes from the graph,
            # whichever rank draws them)
            run.fast = FunctionalSplit(split, compile=options.compile) if rungs else None
            run.num_ladders, why = num_ladders(options, run.fast)
            ladder_seeds = [stream_seeds(ladder_seed(base, c), num)
                            for c in range(1, run.num_ladders)]
            all_seeds = list(seeds[:num]) + [s for other in ladder_seeds for s in other[:num]]
            if ladder_seeds:  # rung c * K + k is ladder c's rung k
                rungs = [c * num + k for c in range(run.num_ladders) for k in rungs]
                betas = betas * run.num_ladders
            ladder_legs = run.ladder.legs
            # the rungs against q: every ladder's on the reference's leg
            referenced = ladder_legs and {c * num + k for c in range(run.num_ladders)
                                          for k in range(*ladder_legs.spans[0])}
            explorers, states, lls, run.explorer_info = build_rungs(
                run.fast or split, rungs, betas, all_seeds, split.device, options.explorer,
                options.explorer_kwargs, run.warmup_steps, options.initial_params,
                reference=run.reference, referenced=referenced)
    run.explorer_info["num_ladders"] = run.num_ladders
    if why:
        run.explorer_info["num_ladders_reason"] = why
    for explorer, z in zip(explorers[:mine], states[:mine]):
        run.rungs.add(explorer, z)
    run.followers = [(explorers[a:a + mine], states[a:a + mine], lls[a:a + mine], other)
                     for a, other in zip(range(mine, len(explorers), mine), ladder_seeds)]
    if missing:
        run.explorer_info["private_api"] = missing
    if legs:
        run.explorer_info["legs"] = legs
    return lls[:mine]


def _auto(run, split):
    """``reference="auto"``: q waits in ``run.joining`` for separated modes
    (:mod:`~pyro_pt.reference.joining`); the run's hot end is the prior until its leg joins
    (a run resumed after that has the checkpoint's two legs, and q)."""
    q = run.reference
    run.joining = (Joining(q, run.warmup_steps, run.options.swap_interval)
                   if why_not(run, split) is None else None)
    if run.ladder.legs is None:
        run.reference = None


def _set_up_block(run, args, kwargs):
    """
    The split and this rank's rungs, agreed on by every rank; returns the rungs' local
    log-likelihoods and the run's seeds.

    Every rank joins the set-up's collectives (the seeds' broadcast, the final check) even when
    its own part failed, so that a failure on one rank (a model that raises on its data, rungs
    that find no valid start, memory) stops every rank with the reason instead of leaving the
    others waiting for the backend's timeout.
    """
    comm, num, failure = run.comm, run.num_replicas, None
    settings, split, lls, view = shared_settings(run), None, None, None
    try:
        split, legs = _split(run, args, kwargs)
    except Exception as error:
        failure = error
    # One base seed from the global generator (so pyro.set_rng_seed governs the run), the same
    # on every rank; the streams are spawned from it (pyro_pt.random), an ensemble's other
    # ladders' from their own base seeds, derived from it.
    base = torch.randint(0, 2**62, (1,), dtype=torch.int64)
    base = int(comm.broadcast(base, src=0, what="broadcast of the seeds")[0])
    seeds = stream_seeds(base, num)
    if failure is None:
        try:
            run.rungs = RungBlock(comm, num, split.latent_names,
                                  kind_of(run.options.explorer))
            lls = _build(run, split, legs, base, seeds, args, kwargs)
            view = [(name, tuple(run.rungs.states[0][name].shape)) for name in split.latent_names]
            view.append(("num_ladders", run.num_ladders))
        except Exception as error:
            failure = error
    agree_on_setup(comm, failure, view, settings)
    run.split = split
    if run.growth:  # rungs added later spawn their streams from the base seeds
        run.growth.base_seed = base
    if run.joining:
        run.joining.base_seed = base
    return lls, seeds


def set_up_run(run, args, kwargs):
    """Fill ``run`` (a :class:`~pyro_pt.run.Run` with its options, communicator, ladder and
    warmup) for the model call ``(args, kwargs)``; see the module."""
    options, comm = run.options, run.comm
    num = run.num_replicas
    # A default ladder grows in one process only: over several, the rungs' blocks are
    # fixed at set-up, and the end of warmup says when the barrier calls for more rungs.
    grows = options.max_replicas and not (options.grows_by_default and comm.world_size > 1)
    run.growth = grows and Growth(options.max_replicas, comm, run.warmup_steps, num,
                                  options.swap_interval) or None
    start = time.perf_counter()
    local_ll, seeds = _set_up_block(run, args, kwargs)
    # capture, checks and compilations (a cold Inductor compile: tens of seconds)
    run.explorer_info["setup_seconds"] = time.perf_counter() - start
    _records(run, local_ll, seeds)
    run.explorer_info["reference"] = ("prior" if run.reference is None
                                      else run.reference.describe())
    if is_auto(options.reference) and run.ladder.legs is None:
        run.explorer_info["joining"] = _describe_joining(run)
    schedule = RoundSchedule(run.warmup_steps, options.swap_interval)
    q = run.reference if run.reference is not None else run.joining and run.joining.reference
    if q and (is_fitted(options.reference) or is_auto(options.reference)):
        run.refitting = Refitting(q, schedule.warmup_ends, run.split.latent_names)
    # compile="auto": TorchScript, then Inductor from the warmup round's end where it pays
    run.autocompile = AutoCompile.for_run(run)
    record_setup(run)  # compile="inductor": what a later "auto" run's switch will cost
    # an ensemble's ladder adapts once, to all its ladders' records (pyro_pt.ensemble)
    adapts = options.adapt_temperatures and run.num_ladders == 1
    schedule.steps = [ReportRow()] + ([LadderAdaptation()] if adapts else [])
    schedule.steps += [step for step in (run.refitting, run.autocompile) if step]
    run.schedule = schedule
    return run


def _describe_joining(run):
    """What ``explorer_info["joining"]`` says at set-up of a ``reference="auto"`` run."""
    if run.joining is None:
        return f"no leg to a fitted q can join: {why_not(run, run.split)}"
    return ("a leg to a Gaussian mixture q joins the prior's where warmup's cold draws show "
            "separated modes")


def _records(run, local_ll, seeds, report=True):
    """``run``'s swap stream, lls, recorder and (where ``report``) report, from its rungs'
    ``local_ll``."""
    num = run.num_replicas
    run.swap_generator = torch.Generator().manual_seed(seeds[num])  # the same on every rank
    run.ll = run.rungs.gather(local_ll)
    run.recorder = TemperingRecorder(num, run.warmup_steps, run.ladder.legs,
                                     run.ladder.exact_hots)
    if not report:
        return
    run.report = Report(run.warmup_steps, run.comm,
                        run.growth and run.growth.max_replicas or None)
    run.report.begin_round(run)


def set_up_followers(first):
    """The runs of an ensemble's other ladders (:mod:`pyro_pt.ensemble`), from the rungs
    ``first``'s set-up built for them: the model's split, captured graphs, ladder and
    explorer info are ``first``'s; the rungs, streams and records their own. They have no
    report and no round-end step of their own: the first ladder's report reads every ladder's
    records (:func:`pyro_pt.report.records`), and the ladders adapt together
    (:class:`~pyro_pt.ensemble.PooledAdaptation`)."""
    runs = []
    for explorers, states, lls, seeds in first.followers:
        run = Run(first.options, first.comm, first.ladder, first.warmup_steps)
        run.split, run.fast, run.reference = first.split, first.fast, first.reference
        run.explorer_info, run.timings = first.explorer_info, first.timings
        run.rungs = RungBlock(first.comm, first.num_replicas, first.split.latent_names,
                              first.rungs.kind)
        for explorer, z in zip(explorers, states):
            run.rungs.add(explorer, z)
        _records(run, lls, seeds, report=False)
        run.schedule = RoundSchedule(run.warmup_steps, first.options.swap_interval)
        run.initial_state = run.rungs.cold_state()
        runs.append(run)
    first.followers = []
    return runs


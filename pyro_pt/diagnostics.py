"""What the kernel says about its run: :meth:`~Diagnostics.diagnostics` (the numbers of
docs/layout.md's "Diagnostics", and the review of :mod:`pyro_pt.health` on them), the Monte
Carlo error of any function of the cold draws (:meth:`~Diagnostics.mcse`,
:mod:`pyro_pt.regeneration`), the progress bar's fields (``logging``), the report and the
adaptation history as the kernel's properties, and at ``cleanup`` the report's closing row with
the review's warnings (:meth:`pyro_pt.report.Report.finish`).

The numbers are collected from the run's parts (the recorder's swap statistics, the rungs'
explorer diagnostics, the lineages' tours, the reference); :func:`~pyro_pt.health.review`
reads them with the ladder, the sampling scans, the explorer kind's advice after divergences,
the reference and a growing ladder's cap.
"""

import math
import warnings

import torch

from .ensemble import Pooled, held_record, pooled_rungs
from .explorers import kind_of
from .health import UNRELIABLE, TemperingWarning, review
from .regeneration import regenerative_error

# A set-up at least this long (seconds) is shown on the progress bar: a cold compile.
SHOWN_SETUP_SECONDS = 5.0


class Diagnostics:
    """What :class:`~pyro_pt.ParallelTempering` says about its run (see the module), read from
    its :attr:`run` (:mod:`pyro_pt.run`)."""

    @property
    def adaptation_history(self):
        """Per adaptation round: its scans, the ladder it ran and the rejection rates seen."""
        return list(self.run.ladder.history) if self.run else []

    @property
    def report(self):
        """The per-round report as a pandas DataFrame (:data:`pyro_pt.report.COLUMNS`); warmup
        rows cover one round each, sampling rows are cumulative."""
        if not self.run:
            raise RuntimeError("report is available after MCMC.run has set the kernel up")
        return self.run.report.data_frame()

    def cleanup(self):
        run = self.run
        if run:
            problems = self.diagnostics()["warnings"] if run.recorder.sampling else []
            run.report.finish(run, problems)

    def logging(self):
        # The cold explorer lives on rank 0; other ranks log the (shared) swap statistics.
        run = self.run
        cold = run.rungs.explorers[0] if run.rungs.start == 0 else None
        out = dict(cold.logging() or {}) if cold is not None else {}
        out.update(self._swap_fields(run))
        seconds = run.explorer_info.get("setup_seconds", 0.0)
        if seconds >= SHOWN_SETUP_SECONDS:  # a long compile, said where the run's progress is
            out["set-up"] = f"{seconds:.0f} s"
        switch = run.autocompile
        if switch and switch.compile_seconds is not None:  # compile="auto" switched
            out["compile"] = f"{switch.engine}, {switch.compile_seconds:.0f} s"
        return out

    def _swap_fields(self, run):
        """The progress bar's swap fields, once per scan: Pyro asks after every call, and with
        several ladders most calls make no scan (:mod:`pyro_pt.ensemble`)."""
        last = getattr(self, "_swaps_logged", None)
        if last is not None and last[0] is run and last[1] == run.scans:
            return last[2]
        records = self._records()
        rates = [a for a in records.acceptance() if not math.isnan(a)]
        out = {"swap acc.": f"{sum(rates) / len(rates) if rates else math.nan:.3f}",
               "round trips": records.round_trips}
        if records.restarts is not None:
            out["restarts"] = records.restarts
        self._swaps_logged = (run, run.scans, out)
        return out

    @staticmethod
    def _num_rounds(run):
        """The swap rounds of ``run``'s sampling phase (of one ladder)."""
        interval = run.options.swap_interval
        return max(0, run.scans // interval - run.warmup_steps // interval)

    def _numbers(self, run, records, rungs, num_rounds):
        """The diagnostics' numbers (all but the review) of ``records`` (a recorder, or
        :class:`~pyro_pt.ensemble.Pooled`) and the rungs' explorer diagnostics ``rungs``."""
        betas = run.betas
        out = records.summary(betas, num_rounds, rungs)
        # The cold chain's means and their Monte Carlo errors over the lineages' tours (None
        # without an exact hot end: no tours, pyro_pt.regeneration).
        tours = records.tours
        _, out["posterior_sd"], errors = tours.summary()
        regenerates = out["restarts"] is not None
        out["mcse"] = errors if regenerates else None
        out["mcse_tours"] = len(tours.sums) if regenerates else None
        # Per chain in MCMC.diagnostics(), where the kernel object keeps only the last chain's.
        out["adaptation_history"] = self.adaptation_history
        if run.reference is not None and betas[records.legs.hots[0]] == 0.0:
            # the stepping stones run from q (normalized) to the posterior: still log p(y)
            out["log_Z_meaning"] = ("log evidence log p(y) (the hottest rung is the reference "
                                    f"q, normalized: a {run.reference.describe()})")
        return out

    def ladder_diagnostics(self):
        """With ``num_ladders > 1``: each ladder's own numbers (the keys of :meth:`diagnostics`
        but the review's), in ladder order, as if each were a chain of its own (the ArviZ
        export's chains, :func:`pyro_pt.to_inference_data`); with one ladder, its
        diagnostics."""
        run = self.run
        if len(run.together) == 1:
            return [self.diagnostics()]
        num_rounds, thinning = self._num_rounds(run), self._thinning()
        out = []
        for r in run.together:
            numbers = self._numbers(r, r.recorder,
                                    r.rungs.summary(r.scans, run.ladder.temperatures), num_rounds)
            kept = r.recorder.tours.num_draws  # the record of the draws MCMC holds
            record = numbers["tempering_record"]
            numbers["tempering_record"] = dict(zip(("log_likelihood", "swap_accepted"), held_record(
                record["log_likelihood"], record["swap_accepted"], thinning, kept)))
            out.append(numbers)
        return out

    def _thinning(self):
        """Every how many scans a ladder's cold draw is in MCMC's (:mod:`pyro_pt.ensemble`)."""
        ensemble = getattr(self, "ensemble", None)
        return 1 if ensemble is None else ensemble.thinning

    def _records(self):
        """The run's swap and draw records: its recorder's, or every ladder's pooled
        (:class:`~pyro_pt.ensemble.Pooled`, ``num_ladders > 1``)."""
        return Pooled([run.recorder for run in self.run.together], self._thinning())

    def mcse(self, fn, samples=None):
        """
        The Monte Carlo standard error of the mean over the cold chain's draws of ``fn``, from
        the tours of the run's lineages (:mod:`pyro_pt.regeneration`): valid where the cold
        chain cannot cross between modes on its own, e.g. for a mode indicator's mean (the
        mode's share) or a prediction. Needs an exact hot end (``max_temperature=inf``, the
        default): without one no such error exists, and it warns and returns NaN. With fewer
        than :data:`~pyro_pt.regeneration.MIN_TOURS` tours it is ``inf``.

        Of the kernel's last run, one chain (of several, the last:
        ``{k: v[-1] for k, v in mcmc.get_samples(group_by_chain=True).items()}``); the means of
        the latent sites themselves are ``diagnostics()["mcse"]``, per chain.

        :param fn: a function of the draws ``{site: tensor[num_draws, ...]}`` (as
            ``mcmc.get_samples()`` gives them) returning a tensor ``[num_draws, ...]``: one
            value per draw, vectorized over the draws (a per-draw function ``f`` can be given
            as ``lambda s: torch.stack([f({k: v[n] for k, v in s.items()}) for n in
            range(len(next(iter(s.values()))))])``); or the values themselves, a tensor
            ``[num_draws, ...]``, with ``samples`` left out.
        :param dict samples: ``mcmc.get_samples()`` of the run (the kernel keeps no draws).
        :returns: a float64 tensor of the shape of one draw's value.
        """
        if not self.run or not self.run.recorder.sampling:
            raise RuntimeError("mcse is available after MCMC.run has drawn samples with this "
                               "kernel")
        if callable(fn):
            if samples is None:
                raise ValueError("mcse(fn) needs the draws: mcse(fn, samples=mcmc.get_samples())")
            values = fn(samples)
        elif samples is None:
            values = fn
        else:
            raise TypeError("mcse takes a function of the draws with samples=, or the values "
                            f"[num_draws, ...] alone; got {type(fn).__name__} with samples")
        if not torch.is_tensor(values):
            values = torch.as_tensor(values)
        records = self._records()
        tours = records.tours.tours
        recorded = len(tours)
        resumed = recorded - self.run.draws_before  # the draws of this MCMC.run, if resumed
        if values.dim() == 0 or values.shape[0] not in (recorded, resumed):
            raise ValueError(
                f"mcse: fn's values have shape {tuple(values.shape)}, expected one value per "
                f"draw of the sampling phase, [num_draws={recorded}, ...]; pass "
                "samples=mcmc.get_samples() of this kernel's last run (not grouped by chain)")
        if values.shape[0] != recorded:  # a resumed run's MCMC holds only the draws since
            tours = tours[self.run.draws_before:]
        if records.restarts is None:
            warnings.warn("mcse: this run has no exact hot end (max_temperature is finite), so "
                          "its cold chain has no regenerations and no Monte Carlo error that "
                          "holds across modes can be given; run with max_temperature=inf",
                          TemperingWarning, stacklevel=2)
            return torch.full(values.shape[1:], math.nan, dtype=torch.float64)
        return regenerative_error(values.detach().cpu(), tours)

    def diagnostics(self):
        run = self.run
        scans, betas = run.scans, run.betas
        num_rounds = self._num_rounds(run)
        ladders = len(run.together)
        rungs = pooled_rungs([r.rungs.summary(scans, run.ladder.temperatures)
                              for r in run.together],
                             [r.recorder.tours.num_draws for r in run.together],
                             self._thinning())
        records = self._records()
        out = self._numbers(run, records, rungs, num_rounds)
        legs = records.legs
        # The review (pyro_pt.health): warnings, and whether log Z is to be trusted.
        if ladders > 1:
            out["num_ladders"] = ladders
        out["warnings"], out["log_Z_error"], unreliable = review(
            out, betas, num_rounds * ladders, max(0, scans - run.warmup_steps) * ladders,
            kind_of(run.options.explorer).on_divergence,
            run.reference and run.reference.describe(), legs,
            run.growth and run.growth.max_replicas or None,
            num_draws=records.tours.num_draws if ladders > 1 else None)
        if unreliable is not None:
            out["log_Z_meaning"] += UNRELIABLE + unreliable
        unfitted = run.refitting and run.refitting.problem()
        if unfitted:
            out["warnings"].append(unfitted)
        return out

"""The state of one tempered run, in one plain object.

A :class:`Run` is built by the kernel's set-up (:func:`pyro_pt.setup.set_up_run`) and passed
to every part that reads or changes the run: the round-end steps (:mod:`pyro_pt.rounds`),
the growth of the ladder, the reference's fits, the compile switch, checkpoints and the
report. No part reaches into the kernel; the kernel holds its run as :attr:`ParallelTempering.run
<pyro_pt.ParallelTempering.run>` and reads its public properties from it. A new run (another
``MCMC.run``) is a new :class:`Run`.

The settings a run was asked for are the kernel's :class:`Options`.
"""

from types import SimpleNamespace


class Options(SimpleNamespace):
    """The kernel's settings: its constructor's arguments (as given, ``reference`` and
    ``transforms`` included), what the constructor concluded from them, and Pyro's
    ``initial_params`` / ``save_params``, and the checkpoint a resumed kernel continues
    (``resume_from``); read by every run set up from it."""


class Run:
    """The state of one run (see the module): its ``options``, communicator (:mod:`pyro_pt.comm`),
    ladder (the one source of its betas) and whole warmup (a resumed run's included)."""

    def __init__(self, options, comm, ladder, warmup_steps):
        self.options = options
        self.comm = comm
        self.ladder = ladder
        self.warmup_steps = warmup_steps
        self.split = None  # the model's ModelSplit
        self.fast = None  # its captured graphs (FunctionalSplit), where a rung is tempered
        self.reference = None  # a GaussianReference, None for the prior
        self.rungs = None  # this rank's RungBlock
        self.ll = None  # the K rungs' log-likelihoods, in rung order, on every rank
        self.swap_generator = None  # the swaps' stream, the same on every rank
        self.recorder = None  # TemperingRecorder
        self.report = None  # Report
        self.schedule = None  # the round-end steps (pyro_pt.rounds)
        self.growth = None  # Growth of a growing ladder, else None
        self.num_ladders = 1  # the ladders of an ensemble (pyro_pt.ensemble), set up
        self.refitting = None  # Refitting of a variational reference, else None
        self.joining = None  # reference="auto": the Joining of q's leg, where it may join
        self.autocompile = None  # AutoCompile of compile="auto", else None
        self.explorer_info = {}
        self.timings = {"explorers": 0.0, "total": 0.0}  # seconds in sample()
        self.initial_state = None  # the cold rung's at the start: what MCMC records first
        self.fingerprint = None  # of the model and data, at the first checkpoint
        self.resume_from = None  # (path, header) of the checkpoint a resumed run continues
        self.resume_payload = None
        self.draws_before = 0  # draws of the run before it was resumed
        # an ensemble's (pyro_pt.ensemble): the other ladders' rungs the set-up built, until
        # their runs take them; and every ladder's run advanced with this one
        self.followers = []
        self.together = [self]

    @property
    def scans(self):
        """Scans done."""
        return self.recorder.scans

    @property
    def betas(self):
        return list(self.ladder.betas)

    @property
    def num_replicas(self):
        return len(self.ladder.betas)

"""The fused leapfrog step: one slot's whole leapfrog step as one compiled call.

Where a process's replicas are evaluated one at a time (``batched == "loop"``, the default on
one CPU thread), each leapfrog step of a slot (:func:`~pyro_pt.potential.leapfrog.leapfrog_step`:
drift, the model's graph, the tempered combination, the finiteness check, kick) is one call of
one graph, run by the single-point graph's engine (Inductor, else TorchScript), instead of a
call of the batched potential with the updates in torch around it. It is used only where it
gives bitwise the unfused step's numbers at the check points.
Measured gain, end to end (``benchmarks/ablation.py``: whole PT runs, one thread, ranges over
interleaved rounds): without it the seed BNN's sampling phase (K = 8, Inductor) takes
1.83-2.10x as long. On small models under Inductor the lockstep step takes precedence; it
is the vmap of the same step over the slots (:mod:`~pyro_pt.potential.lockstep`).
"""

from . import batched
from .capture import Uncapturable, capture, compile_graph, forked_rng, keeping_validation
from .inductor import inductor_compile
from .leapfrog import agrees, check_examples, leapfrog_step


class CompiledSteps:
    """
    Leapfrog steps of a :class:`~pyro_pt.potential.batched.BatchedEvaluator`'s model (its
    single-point graphs and check points), compiled and checked on first use, one per key;
    None where that failed (:attr:`reason` says why). ``_caches`` name what a recompiled graph
    drops and pickling leaves out.
    """

    _caches = ("_steps",)

    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.reason = ""
        self._steps = {}

    def __getstate__(self):
        return {**self.__dict__, **{name: {} for name in self._caches}}

    def forget(self):
        """Drop what was compiled (the graph was recompiled); made again on first use."""
        for name in self._caches:
            getattr(self, name).clear()
        self.reason = ""

    def _cached(self, key, *args):
        if key not in self._steps:
            try:
                self._steps[key] = self._compile(*args)
            except Exception as error:  # no compiler, an unsupported operation, a mismatch
                self.reason = f"{type(error).__name__}: {error}"
                self._steps[key] = None
        return self._steps[key]


class FusedSteps(CompiledSteps):
    """The fused steps, one per dtype, device and validation setting."""

    def step(self, dtype, device):
        """
        One slot's leapfrog step as one graph, for
        :func:`~pyro_pt.explorers.hmc_dynamics.leapfrog_rows`; None unless replicas are
        evaluated one at a time (``path == "loop"``), or where the step is not bitwise the
        evaluator's own calls at the check points (:attr:`reason` says why).
        """
        evaluator = self.evaluator
        if evaluator.path != "loop" or evaluator.compiled.path != "functional":
            return None
        return self._cached(evaluator.compiled.graph_key(dtype, device), dtype, device)

    def _compile(self, dtype, device):
        """The fused step, checked bitwise against the unfused one at the check points."""
        compiled = self.evaluator.compiled
        points = compiled.check_points(dtype, device)
        fn = leapfrog_step(compiled.fx_graph(dtype, device))
        examples = check_examples(points)
        with forked_rng(device), keeping_validation():
            gm = capture(fn, *examples[0])
            if compiled.engine_for(dtype, device) == "inductor":
                step = inductor_compile(gm, *examples[0])
            else:
                step = batched.Interpreted(compile_graph(gm, *examples[0])[0])
        if not agrees(step, self.evaluator, examples):
            raise Uncapturable("the fused leapfrog step is not bitwise the unfused one")
        return step

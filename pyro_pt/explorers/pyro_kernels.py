"""Pyro MCMC kernels as explorers: NUTS, random-walk Metropolis or a user's kernel per rung.

A :class:`PyroKernelExplorer` pairs an MCMC kernel targeting one rung's tempered density with
that rung's random stream, a group of one. At ``target_changed`` (a swap, a compile switch, a
refit) it clears the kernel's cache (Pyro's HMC and NUTS ignore the ``params`` they are given
while their cache is set).

Pyro's HMC and NUTS take every leapfrog step's potential and gradient from
:func:`pyro.ops.integrator.potential_grad`, an autograd round trip (measured at about 0.45 ms
on CPU, as much as the captured graph of a small model); :func:`graph_gradients` answers it
from the graph's own gradients instead, bitwise the same numbers. Pyro's NUTS algorithm is
untouched.
"""

import contextlib
import functools

import pyro.infer.mcmc.hmc
import pyro.infer.mcmc.nuts
import pyro.ops.integrator as integrator
from pyro.infer.mcmc import NUTS as PyroNUTS
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..potential import TemperedPotential, torch_compat
from .contract import ExplorerKind, SingleRungExplorer
from .rwmh import RandomWalkMetropolis


def _leapfrog_takes_the_hook():
    """Whether Pyro's leapfrog step (a private function) still looks ``potential_grad`` up in
    its module at each call, so that replacing the module's name reaches it (the lookup notes
    the reason where it does not)."""
    missing = torch_compat.lookup("_single_step_verlet")[1]
    return not missing and callable(getattr(integrator, "potential_grad", None))


# The hook where Pyro takes it; False turns it off (a test's or a benchmark's baseline).
GRAPH_GRADIENTS = True
# Where Pyro calls potential_grad by its module's name: the leapfrog step, and HMC's and NUTS's
# first evaluation after a cleared cache (a swap).
_CALLERS = (integrator, pyro.infer.mcmc.hmc, pyro.infer.mcmc.nuts)


def _potential_grad(pyro_potential_grad, potential_fn, z):
    fast = getattr(potential_fn, "potential_and_grad", None)
    out = None if fast is None else fast(z)
    return pyro_potential_grad(potential_fn, z) if out is None else out


@contextlib.contextmanager
def graph_gradients():
    """
    Within the block, Pyro's leapfrog steps (and HMC's and NUTS's evaluation of a new state)
    take ``(grads, potential)`` from ``potential_fn.potential_and_grad(z)`` where the potential
    has it (:class:`~pyro_pt.potential.TemperedPotential`) and it answers, else (a point the
    graph leaves to the traced path) from Pyro's own ``potential_grad``. Outside it, where
    Pyro's integrator no longer takes the hook, or with :data:`GRAPH_GRADIENTS` False, Pyro is
    untouched.
    """
    if not (GRAPH_GRADIENTS and _leapfrog_takes_the_hook()):
        yield
        return
    pyro_potential_grad = integrator.potential_grad
    callers = [m for m in _CALLERS if getattr(m, "potential_grad", None) is pyro_potential_grad]
    for module in callers:
        module.potential_grad = lambda fn, z: _potential_grad(pyro_potential_grad, fn, z)
    try:
        yield
    finally:
        for module in callers:
            module.potential_grad = pyro_potential_grad


def make_kernel(explorer, potential_fn, explorer_kwargs, name=None):
    """
    The Pyro MCMC kernel of one rung for ``explorer``: a kernel class taking ``potential_fn=``
    (e.g. ``NUTS``) or a callable ``potential_fn, **kw -> kernel`` (the kinds' names are looked
    up by :func:`~pyro_pt.explorers.registry.kind_of`); ``name``: what the run's ``explorer``
    argument called it, for the errors (by default ``explorer``).
    """
    kwargs = dict(explorer_kwargs or {})
    if isinstance(explorer, type) and issubclass(explorer, MCMCKernel):
        # each rung's kernel built on the rung's potential
        build = lambda fn, **kw: explorer(potential_fn=fn, **kw)  # noqa: E731
    elif callable(explorer):
        build = explorer
    else:
        raise TypeError(f"make_kernel takes an MCMCKernel class or a callable potential_fn -> "
                        f"MCMCKernel, got {explorer!r}")
    try:
        kernel = build(potential_fn, **kwargs)
    except TypeError as e:
        raise TypeError(f"explorer_kwargs {kwargs} were not accepted by explorer "
                        f"{name or explorer!r}: {e}") from e
    if not isinstance(kernel, MCMCKernel):
        raise TypeError("explorer callable must return a pyro.infer.mcmc.mcmc_kernel.MCMCKernel "
                        f"built from the potential_fn it is given, got {type(kernel).__name__}")
    if not callable(getattr(kernel, "clear_cache", None)):
        raise TypeError(
            f"explorer kernel {type(kernel).__name__} has no clear_cache(): ParallelTempering "
            "must invalidate a rung's cached state when a swap replaces it; add a "
            "clear_cache() method (Pyro's HMC and NUTS have one)")
    return kernel


class PyroKernelExplorer(SingleRungExplorer):
    """One rung's ``kernel`` (an ``MCMCKernel`` built on the rung's
    :class:`~pyro_pt.potential.TemperedPotential` ``potential``) and random ``stream``."""

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # (the kernel's potential_fn is the rung's potential, saved here).
    STATE = ("kernel", "stream", "potential")
    REBUILT = ()

    def __init__(self, kernel, stream, potential):
        self.kernel = kernel
        self.stream = stream
        self.potential = potential

    @property
    def beta(self):
        return self.potential.beta

    def set_beta(self, beta):
        """Move the rung to a new inverse temperature (ladder adaptation, during warmup)."""
        self.potential.beta = beta
        self.target_changed()  # the cached potential and gradient were for the old beta

    def start(self, z, warmup_steps):
        with self.stream, graph_gradients():
            self.kernel.initial_params = z
            self.kernel.setup(warmup_steps)
        return z, self.potential.split.log_likelihood(z)

    def move(self, z):
        """One local move from ``z``: the new state and its ll (remembered by the rung's
        potential if the kernel evaluates through it, else from the model's traced split)."""
        with self.stream, graph_gradients():
            z = self.kernel.sample(z)
        ll = None
        if getattr(self.kernel, "potential_fn", None) is self.potential:
            ll = self.potential.known_log_likelihood(z)
        return z, self.potential.split.log_likelihood(z) if ll is None else ll

    def target_changed(self):
        """Forget the cached state and its potential and gradient (a swap, a compile switch, a
        refit)."""
        self.kernel.clear_cache()  # make_kernel checked that it exists

    def diagnostics(self):
        return self.kernel.diagnostics()

    def logging(self):
        return self.kernel.logging()


def pyro_kernel_rung(kernel, rung):
    """A rung's :class:`PyroKernelExplorer` running ``kernel`` (an ``MCMCKernel`` class, or a
    callable ``potential_fn, **kw -> MCMCKernel``): the kernel built on the rung's tempered
    potential with the run's ``explorer_kwargs``."""
    potential = TemperedPotential(rung.split, rung.beta)
    return PyroKernelExplorer(make_kernel(kernel, potential, rung.options, rung.explorer),
                              rung.stream, potential)


def pyro_kernel(kernel):
    """The factory ``build(rung)`` of a kind that runs ``kernel`` on every rung (a partial, so
    that a kernel holding its kind pickles)."""
    return functools.partial(pyro_kernel_rung, kernel)


def _user_kernel_rung(rung):
    return pyro_kernel_rung(rung.explorer, rung)


NUTS = ExplorerKind("nuts", pyro_kernel(PyroNUTS), instead=None)
# Random-walk Metropolis never diverges; its target acceptance sets its scale, not a step.
RWMH = ExplorerKind("rwmh", pyro_kernel(RandomWalkMetropolis), gradients=False,
                    target_option=None)
# A callable or a kernel class given as explorer=; not a name explorer= takes.
CALLABLE = ExplorerKind("callable", _user_kernel_rung)

r"""The potential: a Pyro model split into ``lp(z)`` and ``ll(z)``, and its evaluation.

The contract (docs/design.md): with ``z`` the unconstrained latent values (sites in sorted name
order, flattened by one :class:`~pyro_pt.potential.layout.FlatLayout`), ``lp(z)`` is the log
prior of the latent sites plus the log-det-Jacobian of their transforms and ``ll(z)`` the
scaled, masked log probability of the observed sites and factors; the rung at inverse
temperature :math:`\beta` has the potential energy :math:`-(lp(z) + \beta\, ll(z))`. Every way of
evaluating it gives the traced path's numbers: NaN where distribution validation fails,
``-inf`` where a value is impossible.

- :mod:`~pyro_pt.potential.split`: :class:`ModelSplit` (one Pyro trace per evaluation: the
  reference), the one sum of terms.
- :mod:`~pyro_pt.potential.layout`: the one flat layout of a state, and :class:`FlatState`, a
  state held as its flat row (what the batched explorer returns).
- :mod:`~pyro_pt.potential.tempered`: :class:`TemperedPotential`, one rung's potential for
  Pyro's kernels (it remembers ``ll`` at the points it evaluated).
- :mod:`~pyro_pt.potential.densities` and :mod:`~pyro_pt.potential.capture`: what a captured
  graph computes, and how it is captured, refused or compiled.
- :mod:`~pyro_pt.potential.inductor`: compiling a captured graph with ``torch.compile``
  (Inductor), and the choice between it and TorchScript (``compile="auto"``).
- :mod:`~pyro_pt.potential.torch_compat`: the private torch APIs the fast paths use, each
  looked up in one table, with the public path taken where one is missing.
- :mod:`~pyro_pt.potential.compiled`: :class:`CompiledSplit`, the captured graphs, checked
  against the traced path.
- :mod:`~pyro_pt.potential.batched`: the tempered potentials of many replicas in one call,
  bitwise the same whatever the batch.
- :mod:`~pyro_pt.potential.functional`: :class:`FunctionalSplit`, the split as the explorers use
  it: the captured graph where it is exact, Pyro's trace elsewhere.
- :mod:`~pyro_pt.potential.leapfrog`: the leapfrog step, written once over a captured graph,
  and the unfused step every compiled form of it is checked by.

The accelerators of the compiled path (``compile="inductor"``, ``explorer="hmc"``), one module
each, each kept for an end-to-end gain that ``benchmarks/ablation.py`` measures by switching
it off (stated in its docstring; the table is in ``benchmarks/README.md``):

- :mod:`~pyro_pt.potential.fused`: a slot's whole leapfrog step as one compiled call;
- :mod:`~pyro_pt.potential.lockstep`: on a small model, the steps of all of a process's slots
  as one call; :mod:`~pyro_pt.potential.native`: a trajectory's lockstep calls in a C++ loop;
- :mod:`~pyro_pt.potential.matmul` (with ``matmul.cpp``): the graphs' float32 matrix products
  in our own AVX-512 kernel, on AMD CPUs;
- :mod:`~pyro_pt.potential.constants`: constants with all entries equal written into the
  graph;
- :mod:`~pyro_pt.potential.direct_call`: the compiled code called past Inductor's wrappers;

Dependencies point one way: layout <- split <- densities <- compiled <- batched <- leapfrog <-
fused <- lockstep <- functional, and constants, direct_call, matmul <- inductor <- capture.
"""

from .compiled import CompiledSplit
from .functional import FunctionalSplit
from .layout import FlatLayout, FlatState
from .split import ModelSplit
from .tempered import TemperedPotential

__all__ = ["CompiledSplit", "FlatLayout", "FlatState", "FunctionalSplit", "ModelSplit",
           "TemperedPotential"]

r"""The potential: a Pyro model split into ``lp(z)`` and ``ll(z)``, and its evaluation.

The contract (docs/design.md): with ``z`` the unconstrained latent values (sites in sorted name
order, flattened by one :class:`~pyro_pt.potential.layout.FlatLayout`), ``lp(z)`` is the log
prior of the latent sites plus the log-det-Jacobian of their transforms and ``ll(z)`` the
scaled, masked log probability of the observed sites and factors; the rung at inverse
temperature :math:`\beta` has the potential energy :math:`-(lp(z) + \beta\, ll(z))`. Every way of
evaluating it gives the traced path's numbers: NaN where distribution validation fails,
``-inf`` where a value is impossible.

What each module holds: docs/layout.md ("potential/"). The accelerators of the compiled path
(``compile="inductor"``, ``explorer="hmc"``: fused, lockstep, native, matmul, constants,
direct_call) are one module each, each kept for an end-to-end gain that
``benchmarks/ablation.py`` measures by switching it off, stated in its docstring (the table:
``benchmarks/README.md``; how the fast path is chosen: docs/performance.md).

Dependencies point one way: layout <- split <- densities <- compiled <- batched <- leapfrog <-
fused <- lockstep <- functional; native <- lockstep; constants, direct_call, matmul <- inductor <-
capture.
"""

from .compiled import CompiledSplit
from .functional import FunctionalSplit
from .layout import FlatLayout, FlatState
from .split import ModelSplit
from .tempered import TemperedPotential

__all__ = ["CompiledSplit", "FlatLayout", "FlatState", "FunctionalSplit", "ModelSplit",
           "TemperedPotential"]

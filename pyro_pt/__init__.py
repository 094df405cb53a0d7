"""Parallel tempering for Pyro: a likelihood-tempered replica-exchange MCMC kernel.

Glossary (one word per concept, in code, docs and tests; the whole of it: docs/layout.md):

- **rung**: a temperature index ``k`` of the ladder, cold (``k = 0``, ``T = 1``) first; its
  ``beta_k``, its explorer and its random stream stay with it.
- **replica**: a state ``z`` that moves between rungs on accepted swaps; its **lineage** is its
  path over the rungs.
- **scan**: every rung explores, then (every ``swap_interval`` scans) a **swap round**
  exchanges replicas between adjacent rungs (a **pair**).
- **round**: warmup scans after which the ladder adapts (and a report row is written).
- **explorer**: a rung's local move; explorers move in **groups** (a batched HMC's **slots**).
- **lp / ll**: log prior (with the log-det-Jacobian) and log-likelihood; ``lp + beta ll`` is
  a rung's target.
"""

from .arviz import to_inference_data
from .health import TemperingWarning
from .kernel import ParallelTempering
from .plot import plot_tempering

__all__ = ["ParallelTempering", "TemperingWarning", "plot_tempering", "to_inference_data"]

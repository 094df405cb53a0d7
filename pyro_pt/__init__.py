"""Parallel tempering for Pyro: a likelihood-tempered replica-exchange MCMC kernel.

Glossary (one word per concept, in code, docs and tests):

- **rung**: a temperature index ``k`` of the ladder, cold (``k = 0``, ``T = 1``) first. What
  belongs to a rung stays there: its inverse temperature ``beta_k``, its explorer with its
  adapted step size or scale, its random stream.
- **replica**: a state ``z`` that moves between rungs on accepted swaps; its **lineage** is the
  path of one replica over the rungs (the index process, round trips).
- **ladder**: the rungs' temperatures ``T_k`` / inverse temperatures ``beta_k = 1 / T_k``
  (:class:`~pyro_pt.ladder.Ladder`).
- **scan**: one iteration of the kernel: every rung explores, then (every ``swap_interval``
  scans) a **swap round** exchanges replicas between adjacent rungs (a **pair** ``(i, i+1)``).
- **explorer**: a rung's local move; explorers come in **groups** that move together (the
  batched HMC's rungs of one process; any other explorer is a group of one). Inside the
  batched HMC engine a rung is a **slot**, a row of its state tensor.
- **round**: a stretch of warmup scans after which the ladder adapts (and a report row).
- **lp / ll**: log prior (with the log-det-Jacobian) and log-likelihood of the potential
  (:mod:`pyro_pt.potential`); ``lp + beta ll`` is a rung's target.
"""

from .arviz import to_inference_data
from .health import TemperingWarning
from .kernel import ParallelTempering
from .plot import plot_tempering

__all__ = ["ParallelTempering", "TemperingWarning", "plot_tempering", "to_inference_data"]

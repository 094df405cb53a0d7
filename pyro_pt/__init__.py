"""Parallel tempering for Pyro: a likelihood-tempered replica-exchange MCMC kernel."""

from .arviz import to_inference_data
from .kernel import ParallelTempering
from .plot import plot_tempering

__all__ = ["ParallelTempering", "plot_tempering", "to_inference_data"]

"""Parallel tempering for Pyro: a likelihood-tempered replica-exchange MCMC kernel."""

from .arviz import to_inference_data
from .kernel import ParallelTempering

__all__ = ["ParallelTempering", "to_inference_data"]

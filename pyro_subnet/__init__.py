"""Subnetwork linearized Laplace inference for Pyro models (Daxberger et al., ICML 2021)."""

from .arviz import to_inference_data
from .guide import SubnetworkLaplace
from .posterior import SubnetworkLaplacePosterior

__all__ = ["SubnetworkLaplace", "SubnetworkLaplacePosterior", "to_inference_data"]

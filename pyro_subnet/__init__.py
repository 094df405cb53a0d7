"""Subnetwork linearized Laplace inference for Pyro models (Daxberger et al., ICML 2021)."""

from .arviz import to_inference_data
from .diagonal import DiagonalLaplace, DiagonalLaplacePosterior
from .guide import SubnetworkLaplace
from .posterior import SubnetworkLaplacePosterior

__all__ = ["DiagonalLaplace", "DiagonalLaplacePosterior", "SubnetworkLaplace", "SubnetworkLaplacePosterior",
           "to_inference_data"]

"""Subnetwork linearized Laplace inference for Pyro models (Daxberger et al., ICML 2021)."""

from .arviz import to_inference_data
from .cross_validation import SubnetLOOWarning, loo
from .data_parallel import DataParallelELBO
from .diagonal import DiagonalLaplace, DiagonalLaplacePosterior
from .gather import gather_log_likelihood
from .guide import SubnetworkLaplace
from .kfold import kfold
from .posterior import SubnetworkLaplacePosterior
from .warning import SubnetWarning

__all__ = ["DataParallelELBO", "DiagonalLaplace", "DiagonalLaplacePosterior", "SubnetLOOWarning", "SubnetworkLaplace",
           "SubnetworkLaplacePosterior", "SubnetWarning", "gather_log_likelihood", "kfold", "loo",
           "to_inference_data"]

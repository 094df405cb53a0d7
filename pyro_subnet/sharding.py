r"""
The checks that keep the ranks of a data-parallel :meth:`~pyro_subnet.SubnetworkLaplace.laplace_approximation`
in step, so that shards which disagree stop every rank with an error naming the rank.

Across processes each rank calls ``laplace_approximation(x_shard, y_shard)``; what is a sum
over data (the GGN, the Jacobian energies of the selection, the ``pyro.factor`` terms, the
log-likelihood and its gradient) is summed over the ranks (:mod:`pyro_subnet.comm`), and what is
not (the prior, its Hessian and gradient, at the MAP) is computed alike on every rank. For the
sums to describe one posterior, every rank must hold the same model, guide settings and MAP:

- :func:`prepare` runs a rank's local set-up (the MAP, the chunks of its shard) and then one
  all-gather of a fingerprint (latent sites and shapes, observed and factor sites, the guide's
  settings, a hash of the MAP): a rank whose set-up failed (an untrained guide: a rank that
  skipped the MAP phase) or whose fingerprint differs stops every rank, naming it;
- :func:`check_subnetwork` compares the selected coordinates (a ``"random"`` selection drawn
  from another seed, an explicit selection that differs).
"""

import hashlib

import torch

from .comm import agree
from .data_parallel import refuse_subsampling


def _digest(tensor):
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def _setting(value):
    return f"tensor of shape {tuple(value.shape)}, sha256 {_digest(value)}" if torch.is_tensor(value) else repr(value)


def fingerprint(guide, u_hat):
    """What every rank's set-up must agree on (a dict of plain values)."""
    shapes = guide._unconstrained_shapes
    return {
        "latent sites (unconstrained shapes)": [(name, tuple(shape)) for name, shape in shapes.items()],
        "observed sites": list(guide._observed),
        "pyro.factor sites": list(guide._factors),
        "guide": type(guide).__name__,
        "settings": {key: _setting(getattr(guide, key, None))
                     for key in ("subnetwork_size", "selection", "selection_sites", "variance", "prior_scale")},
        "MAP dtype": str(u_hat.dtype),
        "MAP (sha256)": _digest(u_hat),
    }


def prepare(guide, comm, local_set_up, batches):
    """
    ``local_set_up()`` (returns ``(u_hat, latent, ...)``) on this rank, then one all-gather in which the
    ranks compare their fingerprints: the result of ``local_set_up`` where they agree, else an
    error on every rank naming the rank and what differs (see the module).
    """
    failure, result, report = None, None, {}
    try:
        result = local_set_up()
        if comm.world_size > 1:
            if guide.variance == "swag" and guide.selection in ("predictive", "wasserstein"):
                raise ValueError('variance="swag" runs SGD on one process\'s data; across processes use '
                                 'variance="diag_laplace" (the default) or "exact"')
            with torch.no_grad():
                trace = result[1].trace(result[0], *batches[0])[0]
            for name in guide._observed + guide._factors:
                refuse_subsampling(name, trace.nodes[name]["cond_indep_stack"])
        report = fingerprint(guide, result[0])
    except Exception as error:  # every kind: the other ranks must hear of it, not wait
        failure = error
    agree(comm, failure, report, "laplace_approximation's set-up")
    return result


def check_subnetwork(comm, idx):
    """Every rank selected the same coordinates ``idx``, or every rank raises naming the one that did not."""
    if comm.world_size > 1:
        report = {"subnetwork size": len(idx), "subnetwork indices (sha256)": _digest(idx.long())}
        agree(comm, None, report, "the subnetwork selection")
    return idx

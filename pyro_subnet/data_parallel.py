r"""
The MAP phase of :class:`~pyro_subnet.SubnetworkLaplace` with the data sharded over processes.

With the data split into shards :math:`\mathcal D_1, \dots, \mathcal D_W` (one per rank), the
one-process loss of the MAP guide is

.. math::

    L(u) = -\Big[\log p(T(u)) + \log|\det \partial T/\partial u|\Big] - \sum_{r=1}^W \ell_r(u),
    \qquad \ell_r(u) = \textstyle\sum_{n \in \mathcal D_r} \log p(y_n \mid T(u)),

a prior counted once and a likelihood summed over the shards. Each rank sees only its shard, so
its own ELBO counts the prior once *per rank*. :class:`DataParallelELBO` makes rank ``r``'s loss
:math:`L_r = -[\log p + \log|\det|] - W \ell_r` (its observed sites and ``pyro.factor`` terms,
which are likelihood terms, scaled by the world size ``W``) and averages the ranks' gradients:

.. math::

    \frac1W \sum_r \nabla L_r = -\nabla\Big[\log p + \log|\det|\Big] - \sum_r \nabla \ell_r = \nabla L,

exactly the one-process gradient, whatever the shards' sizes; the returned loss is the
one-process loss. This is Pyro's :class:`~pyro.optim.HorovodOptimizer` pattern (average the
gradients of per-rank losses) with each rank's loss made an exact, not merely unbiased, stand-in
for the whole data's. Every rank therefore takes the same optimizer steps from the same start
(the same seed on every rank) and ends at the one-process MAP, up to the order in which the
float64 sums add up. An optimizer amplifies that rounding over a long run, as it amplifies any
change of summation order (threads, BLAS): the MAP of ``examples/subnet_torchrun.py`` (600
points, Adam) agrees with one process's to 10 digits after 100 steps, 8 after 250, and only 2
after 500, the trajectories then being different runs to nearby optima. The posterior at a
given MAP agrees to 1e-10 (``tests/subnet/test_distributed.py``).

What is supported: a model whose observed sites sit in ``pyro.plate("data", len(x_shard))``
(or in no plate), so that each rank's likelihood is the plain sum over its shard. A plate that
subsamples (``pyro.plate("data", N, subsample_size=...)``) already rescales each rank's
likelihood to the whole data set; it is refused, naming the plate.
"""

import hashlib

import pyro.poutine as poutine
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.elbo import ELBO
from pyro.poutine.messenger import Messenger

from .comm import agree, check_group, make_comm


def likelihood_scale(world_size):
    """The multiplier of each rank's likelihood terms: the world size ``W`` (see the module)."""
    return float(world_size)


def refuse_subsampling(name, frames):
    """A ``ValueError`` naming the plate, if one of ``frames`` subsamples."""
    for frame in frames:
        if frame.full_size not in (None, frame.size):
            raise ValueError(
                f"observed site '{name}' sits in pyro.plate('{frame.name}', {frame.full_size}) subsampled to "
                f"{frame.size}: across processes every rank holds its own shard whole, and the shards' "
                f"likelihoods add up; write pyro.plate('{frame.name}', len(x_shard)) without subsampling"
            )


class _ScaleLikelihood(Messenger):
    """Multiplies the log density of observed sites (and ``pyro.factor`` terms) by ``scale``."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def _process_message(self, msg):
        if msg["type"] == "sample" and msg["is_observed"] and not msg["infer"].get("_deterministic"):
            msg["scale"] = self.scale * msg["scale"]

    def _postprocess_message(self, msg):
        if msg["type"] == "sample" and msg["is_observed"]:
            refuse_subsampling(msg["name"], msg["cond_indep_stack"])


class DataParallelELBO(ELBO):
    r"""
    An ELBO for data sharded over the ranks of a ``torch.distributed`` process group: each
    rank's likelihood is scaled by the world size and the gradients of the parameters are
    averaged over the ranks (float64), so that every rank takes the optimizer step of one
    process holding all the data, with the prior counted once (module docstring). Without a
    process group (one process) it is ``elbo`` itself.

    Example (the same script on every rank, e.g. under ``torchrun``)::

        pyro.set_rng_seed(0)                       # the same start on every rank
        guide = SubnetworkLaplace(model, subnetwork_size=0.1)
        svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), DataParallelELBO(Trace_ELBO()))
        for step in range(2000):
            svi.step(x_shard, y_shard)             # the one-process loss on every rank
        posterior = guide.laplace_approximation(x_shard, y_shard)

    The parameters must be the same on every rank (names and shapes); a rank whose differ
    stops every rank with a ``ValueError`` naming it. Gradients are averaged every step, so
    every rank must call ``svi.step`` equally often.

    :param ELBO elbo: the loss each rank computes on its shard (default
        :class:`~pyro.infer.Trace_ELBO`). For a stochastic guide the ranks' draws must agree
        (the same seed everywhere) for the average to be the one-process gradient.
    :param process_group: the ``torch.distributed`` group, or ``None`` for the default group
        when ``torch.distributed`` is initialized.
    """

    def __init__(self, elbo=None, process_group=None):
        super().__init__()
        if elbo is None:
            elbo = Trace_ELBO()
        if not hasattr(elbo, "loss_and_grads"):
            raise TypeError(f"elbo must be a Pyro ELBO (e.g. Trace_ELBO()), got {type(elbo).__name__}")
        self.elbo = elbo
        self.process_group = check_group(process_group)
        self._comm = None
        self._agreed_layout = None

    @property
    def comm(self):
        if self._comm is None:
            self._comm = make_comm(self.process_group)
        return self._comm

    def _scaled(self, model):
        if self.comm.world_size == 1:  # one process: the ELBO itself, subsampling plates included
            return model
        return _ScaleLikelihood(likelihood_scale(self.comm.world_size))(model)

    def _get_trace(self, model, guide, args, kwargs):
        return self.elbo._get_trace(self._scaled(model), guide, args, kwargs)

    def loss(self, model, guide, *args, **kwargs):
        """The one-process loss, from every rank's loss on its shard (no gradients)."""
        local = self.elbo.loss(self._scaled(model), guide, *args, **kwargs)
        total = self.comm.all_reduce_sum(torch.tensor([float(local)], dtype=torch.float64), "DataParallelELBO's loss")
        return float(total) / self.comm.world_size

    def loss_and_grads(self, model, guide, *args, **kwargs):
        """The one-process loss; leaves the one-process gradient in every parameter's ``.grad``."""
        comm, failure = self.comm, None
        try:
            with poutine.trace(param_only=True) as capture:
                local = self.elbo.loss_and_grads(self._scaled(model), guide, *args, **kwargs)
        except Exception as error:
            if comm.world_size == 1:
                raise
            if self._agreed_layout is not None:  # the others wait in the gradient average
                comm.leave_note(error)
                raise
            failure = error
        if comm.world_size == 1:
            return local
        # the param store's names order the parameters alike on every rank
        params = [] if failure else sorted((n, s["value"].unconstrained()) for n, s in capture.trace.nodes.items())
        if self._agreed_layout is None:  # the first step: the same parameters, from the same start
            layout = [(name, tuple(p.shape)) for name, p in params]
            start = hashlib.sha256(b"".join(_bytes(p) for _, p in params)).hexdigest()[:16]
            agree(comm, failure, {"parameters (name, shape)": layout, "initial parameter values (sha256)": start},
                  "DataParallelELBO's first step (seed every rank alike)")
            self._agreed_layout = layout
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in params]
        flat = torch.cat([torch.tensor([float(local)], dtype=torch.float64)]
                         + [g.detach().reshape(-1).to(device="cpu", dtype=torch.float64) for g in grads])
        flat = comm.all_reduce_sum(flat, "DataParallelELBO's gradient average") / comm.world_size
        pos = 1
        for (_, p), g in zip(params, grads):
            n = p.numel()
            mean = flat[pos : pos + n].reshape(p.shape).to(device=p.device, dtype=p.dtype)
            if p.grad is None:
                p.grad = mean
            else:
                p.grad.copy_(mean)
            pos += n
        return float(flat[0])


def _bytes(tensor):
    return tensor.detach().cpu().contiguous().numpy().tobytes()

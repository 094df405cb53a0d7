"""Helpers to run pyro_subnet on shards of the data under torch.distributed (gloo, 127.0.0.1).

Every task is a function run on every rank of one spawn, in turn, each seeded on its own; one
spawn serves many tasks, since starting processes (each imports torch and Pyro) dominates.
"""

import os

import pyro
import pyro.distributions as dist
import torch
import torch.distributed as tdist
from pyro.infer import SVI, Trace_ELBO

from pyro_subnet import DataParallelELBO, DiagonalLaplace, SubnetworkLaplace
from pyro_subnet import comm as subnet_comm
from pyro_subnet import data_parallel, prior
from tests.spawning import free_port, run_tasks, spawn_catching  # noqa: F401 (the tests import them from here)

N = 24
# unequal shards: rank r holds the points data[bounds[r]:bounds[r + 1]]
BOUNDS = {1: [0, N], 2: [0, 10, N], 4: [0, 3, 8, 15, N]}
SPEC = {"subnetwork_size": 8, "prior_scale": "marglik"}


def model(x, y=None):
    """A 2-6-1 tanh network, Normal(0, 1) weights, LogNormal noise (a transformed latent) and a
    per-point pyro.factor (a likelihood term without a Fisher)."""
    zero, one = x.new_zeros(()), x.new_ones(())  # on the data's device (cuda:rank under nccl)
    W1 = pyro.sample("W1", dist.Normal(zero, one).expand([2, 6]).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(zero, one).expand([6]).to_event(1))
    W2 = pyro.sample("W2", dist.Normal(zero, one).expand([6]).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(-one, 0.5 * one))
    f = torch.tanh(x @ W1 + b1) @ W2
    with pyro.plate("data", x.shape[0]):
        pyro.factor("smooth", -0.05 * f**4)
        pyro.sample("y", dist.Normal(f, sigma), obs=y)


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 2, generator=g, dtype=torch.float64)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    return x, y


def shard(rank, world_size):
    x, y = data()
    a, b = BOUNDS[world_size][rank], BOUNDS[world_size][rank + 1]
    return x[a:b], y[a:b]


def _start(seed=0):
    torch.set_default_dtype(torch.float64)
    pyro.set_rng_seed(seed)
    pyro.clear_param_store()


def summary(posterior, guide=None):
    out = {"loc": posterior.loc, "indices": posterior.subnetwork_indices, "covariance": posterior.covariance,
           "prior_scale": posterior.prior_scale}
    if type(posterior).__name__ == "SubnetworkLaplacePosterior":
        out["log_evidence"] = posterior.log_marginal_likelihood()
        out["marginal_variance"] = guide.marginal_variance
    return out


def laplace(u_map, world_size, guide_cls=SubnetworkLaplace, spec=SPEC):
    """The posterior at the MAP ``u_map`` from this rank's shard (all the data in one process)."""
    _start()
    rank = tdist.get_rank() if tdist.is_initialized() else 0
    x, y = (t.to(u_map.device) for t in shard(rank, world_size))
    guide = guide_cls(model, **spec)
    guide(x, y)  # set up
    with torch.no_grad():
        guide.loc.copy_(u_map)
    return summary(guide.laplace_approximation(x, y), guide)


def export(u_map, world_size, seed=1):
    """The pointwise log-likelihood of every point: this rank's export gathered over the ranks
    (``seed``: the draws' seed, 1 on rank 0 and ``seed`` on the others)."""
    from pyro_subnet import gather_log_likelihood, to_inference_data
    from pyro_arviz.convert import datasets

    _start()
    rank = tdist.get_rank() if tdist.is_initialized() else 0
    x, y = shard(rank, world_size)
    guide = SubnetworkLaplace(model, **SPEC)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(u_map)
    posterior = guide.laplace_approximation(x, y)
    pyro.set_rng_seed(1 if rank == 0 else seed)
    gathered = datasets(gather_log_likelihood(to_inference_data(posterior, x, y, num_samples=50)))
    return {"log_likelihood": gathered["conditional_log_likelihood"]["y"].values, "observed": gathered["observed_data"]["y"].values}


def on_cuda(u_map):
    """:func:`laplace` with the model, the data and the MAP on ``cuda:rank`` (nccl)."""
    result = laplace(u_map.to(torch.device("cuda", tdist.get_rank())), tdist.get_world_size())
    return {k: v.cpu() if torch.is_tensor(v) else v for k, v in result.items()}


def map_phase(world_size, steps=200):
    """The MAP phase with DataParallelELBO on this rank's shard, then the posterior."""
    _start()
    rank = tdist.get_rank() if tdist.is_initialized() else 0
    x, y = shard(rank, world_size)
    guide = SubnetworkLaplace(model, **SPEC)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.02}), DataParallelELBO(Trace_ELBO()))
    losses = torch.tensor([svi.step(x, y) for _ in range(steps)])
    return {"losses": losses, **summary(guide.laplace_approximation(x, y), guide)}


def one_process_map(steps=200):
    """The reference MAP phase: Trace_ELBO on the whole data, one process."""
    _start()
    x, y = data()
    guide = SubnetworkLaplace(model, **SPEC)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.02}), Trace_ELBO())
    losses = torch.tensor([svi.step(x, y) for _ in range(steps)])
    return {"losses": losses, **summary(guide.laplace_approximation(x, y), guide)}


def planted(bug, fn, *args):
    """``fn(*args)`` with a planted bug: ``"prior_per_rank"`` (the MAP phase: likelihoods not
    scaled, so each rank's prior counts; the curvature: each rank's prior Hessian summed too) or
    ``"curvature_not_reduced"`` (every sum over the ranks left out) or ``"ggn_not_reduced"`` (the
    subnetwork's GGN alone left out: the selection still agrees)."""
    saved = (data_parallel.likelihood_scale, prior.prior_hessian, subnet_comm.TorchComm.all_reduce_sum)
    try:
        if bug == "prior_per_rank":
            data_parallel.likelihood_scale = lambda world_size: 1.0
            hessian = prior.prior_hessian
            prior.prior_hessian = lambda *a, **k: subnet_comm.make_comm().all_reduce_sum(hessian(*a, **k))
        elif bug == "curvature_not_reduced":
            subnet_comm.TorchComm.all_reduce_sum = lambda self, tensor, what=None: tensor
        elif bug == "ggn_not_reduced":
            reduce = subnet_comm.TorchComm.all_reduce_sum
            subnet_comm.TorchComm.all_reduce_sum = (lambda self, tensor, what=None: tensor
                                                    if "subnetwork's curvature" in what else reduce(self, tensor, what))
        return fn(*args)
    finally:
        data_parallel.likelihood_scale, prior.prior_hessian, subnet_comm.TorchComm.all_reduce_sum = saved


def disagreeing(kind, u_map, world_size):
    """A laplace_approximation in which rank 1 differs from the others by ``kind``."""
    _start()
    rank = tdist.get_rank()
    x, y = shard(rank, world_size)
    spec = dict(SPEC)
    if kind == "size" and rank == 1:
        spec["subnetwork_size"] = 9
    if kind == "random":  # the same settings, another seed on rank 1: other coordinates drawn
        spec = {"subnetwork_size": 8, "selection": "random"}
        pyro.set_rng_seed(rank == 1)
    guide = SubnetworkLaplace(model, **spec)
    guide(x, y)
    if not (kind == "skipped_map" and rank == 1):
        with torch.no_grad():
            guide.loc.copy_(u_map + (1e-9 if kind == "map" and rank == 1 else 0.0))
    return summary(guide.laplace_approximation(x, y))


def map_disagreeing(kind):
    """The first MAP step with rank 1 seeded otherwise (``"seed"``) or failing in its model (``"model"``)."""
    _start(seed=int(kind == "seed" and tdist.get_rank() == 1))
    x, y = shard(tdist.get_rank(), tdist.get_world_size())

    def failing(x, y):
        if kind == "model" and tdist.get_rank() == 1:
            raise ValueError("the data of rank 1 are unusable")
        model(x, y)

    guide = SubnetworkLaplace(failing, **SPEC)
    return SVI(failing, guide, pyro.optim.Adam({"lr": 0.02}), DataParallelELBO()).step(x, y)


def subsampled(where):
    """A model whose data plate subsamples, in the MAP phase or the Laplace step."""
    _start()
    x, y = shard(tdist.get_rank(), tdist.get_world_size())

    def sub_model(x, y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        with pyro.plate("data", N, subsample=torch.arange(len(x))):
            pyro.sample("y", dist.Normal(w * x[:, 0], 1.0), obs=y)

    guide = SubnetworkLaplace(sub_model, subnetwork_size=1)
    if where == "map":
        SVI(sub_model, guide, pyro.optim.Adam({"lr": 0.02}), DataParallelELBO()).step(x, y)
    guide(x, y)
    with torch.no_grad():
        guide.loc.fill_(0.5)
    return guide.laplace_approximation(x, y)


def die_in_curvature(u_map, dead_rank):
    """Rank ``dead_rank`` exits abruptly while the others sum the curvature."""
    from pyro_subnet import curvature

    ggn = curvature.ggn

    def dying(*args, **kwargs):
        if tdist.get_rank() == dead_rank:
            os._exit(3)
        return ggn(*args, **kwargs)

    curvature.ggn = dying
    return laplace(u_map, tdist.get_world_size())


def spawn(world_size, out_dir, fn, *args, timeout=60.0, wait=300.0, backend="gloo"):
    """``fn(*args)`` on ``world_size`` ranks; each rank's result, error dict, or ``None`` (it died)."""
    return spawn_catching(world_size, out_dir, fn, *args, timeout=timeout, wait=wait, backend=backend)

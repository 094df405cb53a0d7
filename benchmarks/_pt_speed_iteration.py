"""Section (b) of pt_speed.py: one explorer iteration of ParallelTempering(explorer="hmc") with
K = 8 rungs against one, the time inside the batched potential, and the plain-torch floor of
the batched potential (K replicas through torch.baddbmm) with the GFLOP/s of its matmuls."""

import math
import statistics
import time
import warnings

import torch

import pyro
from pyro.infer.autoguide.initialization import init_to_uniform

from _bnn import NOISE, WIDTHS, CountingModel, initial_params, make_data

from pyro_pt import ParallelTempering
from pyro_pt.potential import FunctionalSplit

from _pt_speed_potential import BETA, floor_fn, synchronize, time_rounds


def batched_floor_fn(x, y, z, betas):
    """The floor's tempered potential and gradient for K = len(betas) replicas in one call.

    ``z`` holds the flat latents ``(K, D)``; each site is a view of its columns with the replica
    dimension in front, so every layer is one batched matmul with x shared by all replicas.
    """
    const = 0.5 * math.log(2 * math.pi)
    k = len(betas)
    sizes = [n_in * n_out + n_out for n_in, n_out in zip(WIDTHS, WIDTHS[1:])]
    xs = x.expand(k, *x.shape)  # a stride-0 view, not K copies

    def run():
        flat = z.detach().requires_grad_(True)
        lp = (-0.5 * flat * flat).sum(-1) - const * flat.shape[-1]
        h = xs
        for layer, (part, n_in, n_out) in enumerate(
                zip(flat.split(sizes, dim=-1), WIDTHS, WIDTHS[1:])):
            w = part[:, :n_in * n_out].view(k, n_in, n_out)
            b = part[:, n_in * n_out:].unsqueeze(1)
            h = torch.baddbmm(b, h, w)
            if layer < len(sizes) - 1:
                h = torch.relu(h)
        r = (y - h.squeeze(-1)) / NOISE
        ll = (-0.5 * r * r).sum(-1) - y.numel() * (math.log(NOISE) + const)
        potential = -(lp + betas * ll)
        # Replicas are independent, so the gradient of the sum is each replica's own gradient.
        return potential, torch.autograd.grad(potential.sum(), flat)[0]

    return run


def batched_floor_report(args):
    """K = 8 against K = 1 of the hand-written batched floor: the ratio the arithmetic allows."""
    x, y = (t.to(args.device) for t in make_data())
    z = initial_params()
    names = list(z)  # w0, b0, w1, b1, w2, b2: the flat layout batched_floor_fn slices
    flat = torch.cat([z[n].reshape(-1) for n in names])
    gen = torch.Generator().manual_seed(0)
    batch = (flat + 0.01 * torch.randn(8, flat.numel(), generator=gen)).to(args.device)
    betas = torch.linspace(BETA, 0.05, 8, device=args.device)  # replica 0 at the floor's BETA
    fns = {"K=1": batched_floor_fn(x, y, batch[:1], betas[:1]),
           "K=8": batched_floor_fn(x, y, batch, betas)}
    # Replica 0 against the unbatched floor of (a), at the same point and beta.
    pot, grad = fns["K=8"]()
    z0, at = {}, 0
    for n in names:
        z0[n] = batch[0, at:at + z[n].numel()].view(z[n].shape)
        at += z[n].numel()
    ref_pot, ref_grad = floor_fn(x, y, names)(z0)
    ref_grad = torch.cat([g.reshape(-1) for g in ref_grad])
    grad_err = (grad[0] - ref_grad).abs().max() / ref_grad.abs().max()
    medians, _ = time_rounds(fns, args.rounds, args.calls)
    # Multiply-adds per replica and call, the three matmuls only (the elementwise work is
    # O(500 * 129) against O(500 * 4800)): forward 500 * (10*64 + 64*64 + 64*1); backward the
    # same again for the weight gradients, plus the input gradients of layers 2 and 3 (the first
    # layer's input x needs none). FLOPs = 2 * MACs.
    fwd = sum(n_in * n_out for n_in, n_out in zip(WIDTHS, WIDTHS[1:]))
    macs = x.shape[0] * (2 * fwd + fwd - WIDTHS[0] * WIDTHS[1])
    k1, k8 = medians["K=1"], medians["K=8"]
    print(f"\nplain-torch floor for the batched ratio (baddbmm over a replica dimension, "
          f"float32, {args.device}, torch.get_num_threads() = {torch.get_num_threads()}, "
          f"medians of {args.rounds} interleaved rounds of {args.calls} calls; replica 0 vs "
          f"the floor of (a): potential {float(pot[0].detach()):.3f} vs "
          f"{float(ref_pot.detach()):.3f}, max |grad diff| / max |grad| {float(grad_err):.1e}); "
          f"{2 * macs / 1e6:.2f} MFLOP per replica:")
    for name, k, ms in (("K=1", 1, k1), ("K=8", 8, k8)):
        print(f"  {name}: {ms:.3f} ms/call, {ms / k:.3f} ms per replica, "
              f"{2 * macs * k / (ms * 1e-3) / 1e9:.1f} GFLOP/s")
    print(f"plain-torch floor, K = 8 / K = 1 per potential+gradient call: {k8 / k1:.2f}")


HMC_FIXED = {"adapt_step_size": False, "adapt_mass_matrix": False, "num_steps_jitter": 0}


class PotentialClock:
    """Wall time and calls inside ``FunctionalSplit.batched_potential_and_grad``, from outside."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0
        self._original = FunctionalSplit.batched_potential_and_grad

    def __enter__(self):
        clock, original = self, self._original

        def timed(fast, z_flat, betas):
            start = time.perf_counter()
            try:
                return original(fast, z_flat, betas)
            finally:
                clock.seconds += time.perf_counter() - start
                clock.calls += 1

        FunctionalSplit.batched_potential_and_grad = timed
        return self

    def __exit__(self, *exc):
        FunctionalSplit.batched_potential_and_grad = self._original


def ready_kernel(x, y, seed, **kwargs):
    """A ParallelTempering kernel set up for sampling (no warmup), and its first params."""
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(CountingModel(device=x.device), adapt_temperatures=False,
                               init_strategy=init_to_uniform(radius=0.1), **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel.setup(0, x, y)
    return kernel, kernel.initial_params


def time_iterations(sides, rounds, iters, clock=None, warmup=2):
    """Median ms per ``kernel.sample`` of each side over interleaved rounds (and potential ms)."""
    times = {name: [] for name in sides}
    pot = {name: [] for name in sides}
    state = {name: params for name, (_, params) in sides.items()}
    for _ in range(rounds):
        for name, (kernel, _) in sides.items():
            params = state[name]
            for _ in range(warmup):
                params = kernel.sample(params)
            before = clock.seconds if clock else 0.0
            synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                params = kernel.sample(params)
            synchronize()
            elapsed = time.perf_counter() - start
            times[name].append(elapsed / iters * 1e3)
            pot[name].append(((clock.seconds if clock else 0.0) - before) / iters * 1e3)
            state[name] = params
    return ({n: statistics.median(v) for n, v in times.items()},
            {n: statistics.median(v) for n, v in pot.items()}, times)


def section_b(args):
    threads = torch.get_num_threads()
    print(f"\n(b) one explorer iteration, K = 8 rungs in one process vs K = 1, explorer='hmc' "
          f"(batched) on {args.device}, {args.num_steps} leapfrog steps, "
          f"step size {args.step_size}, no "
          f"adaptation, {threads} torch thread(s), medians of {args.b_rounds} interleaved "
          f"rounds of {args.b_iters} iterations")
    x, y = (t.to(args.device) for t in make_data())
    options = dict(HMC_FIXED, num_steps=args.num_steps, step_size=args.step_size)
    with PotentialClock() as clock:
        one, one_params = ready_kernel(x, y, 0, temperatures=[1.0], explorer="hmc",
                                       explorer_kwargs=options)
        eight, eight_params = ready_kernel(x, y, 0, num_replicas=8, max_temperature=1.5,
                                           explorer="hmc", explorer_kwargs=options)
        print(f"explorer_info K=1: {one.explorer_info}")
        print(f"explorer_info K=8: {eight.explorer_info}")
        sides = {"K=1": (one, one_params), "K=8": (eight, eight_params)}
        calls = clock.calls
        medians, pot, raw = time_iterations(sides, args.b_rounds, args.b_iters, clock)
        calls = clock.calls - calls
    k1, k8 = medians["K=1"], medians["K=8"]
    print(f"\n{'':8s}{'ms/iteration':>14s}{'in potential':>14s}{'share':>8s}{'per rung':>10s}"
          f"{'rounds (ms/iteration)':>26s}")
    for name, k in (("K=1", 1), ("K=8", 8)):
        spread = ", ".join(f"{v:.1f}" for v in raw[name])
        print(f"{name:8s}{medians[name]:14.2f}{pot[name]:14.2f}"
              f"{pot[name] / medians[name]:8.0%}{medians[name] / k:10.2f}   {spread}")
    print(f"potential calls per iteration (both sides, warm-up iterations included): "
          f"{calls / (2 * args.b_rounds * (args.b_iters + 2)):.1f}")
    print(f"K=8 / K=1 per iteration: {k8 / k1:.2f} (target <= 2); per rung: "
          f"{k8 / 8:.2f} ms vs {k1:.2f} ms ({k8 / 8 / k1:.2f}x); share of the K=1 iteration in "
          f"the potential: {pot['K=1'] / k1:.0%}, outside it {k1 - pot['K=1']:.2f} ms")
    batched_floor_report(args)
    if args.nuts_ratio:
        nuts = {"step_size": args.step_size, "adapt_step_size": False,
                "adapt_mass_matrix": False, "max_tree_depth": args.b_nuts_depth}
        sides = {"K=1": ready_kernel(x, y, 0, temperatures=[1.0], explorer="nuts",
                                     explorer_kwargs=nuts),
                 "K=8": ready_kernel(x, y, 0, num_replicas=8, max_temperature=1.5,
                                     explorer="nuts", explorer_kwargs=nuts)}
        iters = max(1, args.b_iters // 4)
        medians, _, _ = time_iterations(sides, args.b_rounds, iters, warmup=1)
        print(f"context, explorer='nuts' (Pyro NUTS per rung, max_tree_depth "
              f"{args.b_nuts_depth}, fixed step {args.step_size}, {iters} iterations a round): "
              f"K=1 {medians['K=1']:.1f} ms, K=8 {medians['K=8']:.1f} ms/iteration, "
              f"K=8 / K=1 {medians['K=8'] / medians['K=1']:.2f}")

"""Comparisons of a FunctionalSplit with the traced ModelSplit it replaces: random points
around the initial one, densities and gradients by autograd, and a relative tolerance."""

import torch

RTOL = 1e-6


def points(split, num, seed, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    z0 = split.initial_point()
    return [{k: v + scale * torch.randn(v.shape, generator=generator) for k, v in z0.items()}
            for _ in range(num)]


def densities_and_grads(split, z):
    """lp, ll and their gradients (flat) from ``split.log_densities`` by autograd."""
    z = {k: v.detach().clone().requires_grad_(True) for k, v in z.items()}
    lp, ll = split.log_densities(z)
    grads = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(
        term, [z[n] for n in sorted(z)], retain_graph=True)]) for term in (lp, ll)]
    return lp.detach(), ll.detach(), grads[0], grads[1]


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    scale = expected.abs().max().clamp(min=1e-12)
    assert float((actual - expected).abs().max()) <= rtol * float(scale), (actual, expected)


def assert_same_as_traced(split, fast, zs):
    for z in zs:
        for actual, expected in zip(densities_and_grads(fast, z), densities_and_grads(split, z)):
            assert_close(actual, expected)

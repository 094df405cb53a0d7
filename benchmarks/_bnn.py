"""The seed BNN: a tutorial-sized network as a Pyro BNN, shared by the benchmarks.

An MLP 10 -> 64 -> 64 -> 1 with ReLU activations, Normal(0, 1) priors on every weight and bias
(4929 latent coordinates), and a Gaussian likelihood with a fixed noise sigma = 0.1, on 500
synthetic points whose targets come from a random teacher network of the same shape.
"""

import torch

import pyro
import pyro.distributions as dist

NUM_DATA = 500
WIDTHS = (10, 64, 64, 1)
NOISE = 0.1


class CountingModel:
    """The BNN as a Pyro model that counts its own executions (model traces), for benchmarks."""

    def __init__(self, widths=WIDTHS, noise=NOISE, device=None):
        self.widths = tuple(widths)
        self.noise = noise
        self.calls = 0
        # The priors' parameters on the data's device, so the latents live there too.
        self.zero = torch.tensor(0.0, device=device)
        self.one = torch.tensor(1.0, device=device)

    def __call__(self, x, y=None):
        self.calls += 1
        h = x
        num_layers = len(self.widths) - 1
        prior = dist.Normal(self.zero, self.one)
        for layer, (n_in, n_out) in enumerate(zip(self.widths, self.widths[1:])):
            w = pyro.sample(f"w{layer}", prior.expand([n_in, n_out]).to_event(2))
            b = pyro.sample(f"b{layer}", prior.expand([n_out]).to_event(1))
            h = h @ w + b
            if layer < num_layers - 1:
                h = torch.relu(h)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(h.squeeze(-1), self.noise), obs=y)


def make_data(num_data=NUM_DATA, widths=WIDTHS, noise=NOISE, seed=0):
    """Synthetic inputs x ~ N(0, I) and targets from a random teacher MLP plus N(0, noise^2)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_data, widths[0], generator=generator)
    h = x
    for layer, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        # 1/sqrt(fan-in) keeps the teacher's output of order one.
        w = torch.randn(n_in, n_out, generator=generator) / n_in**0.5
        h = h @ w
        if layer < len(widths) - 2:
            h = torch.relu(h)
    y = h.squeeze(-1) + noise * torch.randn(num_data, generator=generator)
    return x, y


def initial_params(widths=WIDTHS, scale=0.1, seed=1):
    """A small random starting point (unconstrained = constrained here: all sites are real)."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for layer, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        params[f"w{layer}"] = scale * torch.randn(n_in, n_out, generator=generator)
        params[f"b{layer}"] = scale * torch.randn(n_out, generator=generator)
    return params

"""The prior rung's draws without a trace of the model, where no latent site's prior depends on
another latent.

A draw of the prior rung (beta = 0) is, by default, one trace of the whole model: its Python
and Pyro's messengers cost about 0.5 ms on the two-component mixture, a third of a scan under
Inductor. Where every latent site's prior distribution is fixed (it reads data, constants and
``pyro.param`` values but no other latent, as in a mixture's means, a regression's
coefficients, a BNN's weights or a non-centred hierarchy), the same exact draw is each site's
distribution sampled on its own, and its ll is one call of the captured graph
(:class:`DirectPrior`).

Whether a site's prior is fixed is checked once, on traces of the model at different latent
values: the site's distribution, as each trace builds it, must give bitwise the same log
density at every trace's value of the site. A prior that reads another latent (a centred
hierarchy's ``theta ~ Normal(mu, tau)``) gives other densities at other values of ``mu`` and
``tau`` and keeps the trace (:attr:`DirectPrior.reason` names the site).
"""

import torch

import pyro.poutine as poutine

from .capture import forked_rng

# traces of the model the check compares (a fixed prior gives the same density in each)
_CHECK_TRACES = 3
_CHECK_SEED = 20261207


def _prior_traces(split, count):
    """``count`` traces of the model drawn from its prior, leaving the global random state as
    it was (the set-up must not shift any rung's stream)."""
    with forked_rng(split.device), torch.no_grad():
        torch.manual_seed(_CHECK_SEED)
        return [poutine.trace(split.model).get_trace(*split.model_args, **split.model_kwargs)
                for _ in range(count)]


def fixed_priors(split):
    """``(priors, reason)``: each latent site's prior distribution (site -> distribution), where
    none depends on another latent (see the module), else ``(None, why)`` naming a site."""
    traces = _prior_traces(split, _CHECK_TRACES)
    priors = {}
    for name in split.latent_names:
        if any(name not in t.nodes for t in traces):
            return None, f"latent site {name!r} is not in every trace of the model"
        fns = [t.nodes[name]["fn"] for t in traces]
        values = [t.nodes[name]["value"] for t in traces]
        first = fns[0]
        for fn in fns[1:]:
            if (type(fn) is not type(first) or fn.batch_shape != first.batch_shape
                    or fn.event_shape != first.event_shape):
                return None, f"latent site {name!r}'s prior changes from trace to trace"
        with torch.no_grad():
            for value in values:
                reference = first.log_prob(value)
                if not all(torch.equal(fn.log_prob(value), reference) for fn in fns[1:]):
                    return None, (f"latent site {name!r}'s prior depends on another latent (or "
                                  "on random numbers the model draws)")
        priors[name] = first
    return priors, ""


class DirectPrior:
    """
    Exact prior draws of a :class:`~pyro_pt.potential.functional.FunctionalSplit`'s model in
    unconstrained space, with their ll: each fixed prior sampled on its own (on the global
    random state, as a trace draws) and ll from the captured graph; the model's trace where the
    graph does not answer (a draw whose ll it cannot give finite, or a model whose priors are
    not fixed: :attr:`path` ``"traced"``, :attr:`reason` why).

    Measured (``benchmarks/prior_draws.py``, one thread, the prior rung's draws made 64 at a
    time by :class:`~pyro_pt.explorers.prior.PriorExplorer`): a draw of the mixtures' or the
    logistic regression's prior costs 0.05-0.07 ms under Inductor and 0.25 ms under TorchScript,
    against the trace's 0.5-0.6 ms; a default run's sampling phase under Inductor (1000 scans)
    takes 1.30x less time on the two-component mixture, 1.35x on the three-component one and
    1.11x on the logistic regression (13 rungs, a larger model: the prior rung is a smaller
    share).
    """

    def __init__(self, fast):
        self.fast = fast
        split = fast.split
        self.priors, self.reason = (None, fast.reason) if fast.path != "functional" else \
            fixed_priors(split)
        self.transforms = split.transforms

    @property
    def path(self):
        return "direct" if self.priors is not None else "traced"

    def block(self, count):
        """``count`` exact prior draws at once (direct path only), flat in the layout's order
        ``[count, D]``: each fixed prior sampled ``count`` times in one call."""
        compiled = self.fast.compiled
        with torch.no_grad():
            return compiled.layout.flatten_rows({
                name: self.transforms[name](fn.sample((count,)))
                for name, fn in self.priors.items()}, count)

    def finish(self, row):
        """A draw of :meth:`block` (a row ``[D]``) as ``(z, ll)``: its sites and its ll, from
        the captured graph (the traced path where the graph's is not finite)."""
        z = self.fast.compiled.layout.unflatten(row)  # a plain dict: Pyro's kernels copy it
        return z, self.fast.graph_log_likelihood(z, row)

    def __call__(self):
        """An exact draw from the prior (site -> unconstrained tensor) and its ll."""
        if self.priors is None:
            return self.fast.split.sample_prior()
        return self.finish(self.block(1)[0])

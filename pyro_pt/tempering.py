"""Split a Pyro model's log density in unconstrained space into prior and likelihood parts.

With ``z`` the unconstrained latent values, ``lp(z)`` is the log prior of the latent sites plus
the log-det-Jacobian of the transforms to unconstrained space, and ``ll(z)`` the log probability
of the observed sites (``obs=`` and ``pyro.factor``), with plate subsampling and
``poutine.scale`` factors applied. The replica at inverse temperature ``beta`` targets
``lp(z) + beta * ll(z)`` (DESIGN §1): the prior is never tempered.
"""

import math
import weakref

import torch
from torch.distributions import biject_to

import pyro.poutine as poutine
from pyro.distributions import ImproperUniform
from pyro.infer.autoguide.initialization import InitMessenger, init_to_uniform
from pyro.poutine.subsample_messenger import _Subsample


def _is_counted(site):
    """Sample sites whose log density belongs in lp or ll (not deterministic, not plates)."""
    return (
        site["type"] == "sample"
        and not site["infer"].get("_deterministic", False)
        and not isinstance(site["fn"], _Subsample)
    )


def _is_invalid_value_error(error):
    """Distribution validation failing on NaN/inf parameters or values out of support."""
    message = str(error)
    return "found invalid values" in message or "must be within the support" in message


def _is_improper(fn):
    while fn is not None:
        if isinstance(fn, ImproperUniform):
            return True
        fn = getattr(fn, "base_dist", None)
    return False


class ModelSplit:
    """
    The prior/likelihood split of one Pyro model for fixed model arguments.

    Traces the model once at construction to find the latent and observed sites and the
    transforms to unconstrained space (``biject_to(support).inv``, as Pyro's HMC uses).

    :param callable model: the Pyro model.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param dict transforms: optional site -> transform overrides (constrained -> unconstrained).
    :param callable init_strategy: per-site initialization used for the structural trace and
        :meth:`initial_point` (an improper prior needs one that does not sample it).
    """

    def __init__(
        self, model, model_args=(), model_kwargs=None, transforms=None,
        init_strategy=init_to_uniform,
    ):
        self.model = model
        self.model_args = tuple(model_args)
        self.model_kwargs = dict(model_kwargs or {})
        self.init_strategy = init_strategy
        trace = self._initial_trace()
        self.latent_names, self.observed_names = [], []
        self.transforms = {}
        self._prior_fns = {}
        for name, site in trace.nodes.items():
            if not _is_counted(site):
                continue
            if site["is_observed"]:
                self.observed_names.append(name)
                continue
            fn = site["fn"]
            self.latent_names.append(name)
            self._prior_fns[name] = fn
            if transforms is not None and name in transforms:
                self.transforms[name] = transforms[name]
            else:
                self.transforms[name] = biject_to(fn.support).inv
        if not self.observed_names:
            raise ValueError(
                "the model has no observed site (obs= or pyro.factor), so there is no likelihood "
                "to temper; condition the model on data before passing it to ParallelTempering"
            )
        if not self.latent_names:
            raise ValueError("the model has no latent sample site to sample")
        self.latent_names.sort()
        # Where the model keeps its latents: the device whose random stream the explorers use.
        self.device = trace.nodes[self.latent_names[0]]["value"].device

    def check_proper_prior(self):
        """Raise unless every latent site has a proper prior one can draw from (for beta = 0)."""
        for name in self.latent_names:
            if _is_improper(self._prior_fns[name]):
                raise ValueError(
                    f"latent site {name!r} has an improper prior, so the prior rung "
                    "(temperature inf, beta = 0) is not a distribution: give it a proper prior "
                    "or use a finite max_temperature"
                )

    def constrain(self, z):
        return {name: self.transforms[name].inv(value) for name, value in z.items()}

    def _split_trace(self, trace, z, constrained):
        trace.compute_log_prob(site_filter=lambda name, site: _is_counted(site))
        lp = ll = 0.0
        for name in self.observed_names:
            ll = ll + trace.nodes[name]["log_prob_sum"]
        for name in self.latent_names:
            lp = lp + trace.nodes[name]["log_prob_sum"]
            # Density of z = T(x): p(x) |d x / d z|, i.e. minus log|dT/dx|.
            lp = lp - self.transforms[name].log_abs_det_jacobian(constrained[name], z[name]).sum()
        return lp, ll

    def log_densities(self, z):
        """
        ``(lp(z), ll(z))`` for unconstrained values ``z`` (dict site -> tensor), in one trace.
        """
        constrained = self.constrain(z)
        conditioned = poutine.condition(self.model, data=constrained)
        try:
            trace = poutine.trace(conditioned).get_trace(*self.model_args, **self.model_kwargs)
            return self._split_trace(trace, z, constrained)
        except ValueError as error:
            # With validation on, a NaN parameter or latent raises (in the model or in a
            # log_prob); it is a rejected point, not a crash.
            if not _is_invalid_value_error(error):
                raise
            nan = sum(v.sum() for v in z.values()) * math.nan  # keeps autograd connected
            return nan, nan

    def log_likelihood(self, z):
        """``ll(z)`` as a float, without autograd."""
        with torch.no_grad():
            return float(self.log_densities(z)[1])

    def sample_prior(self):
        """
        An exact draw from the prior in unconstrained space and its log-likelihood, from one
        trace of the model (uses the global torch random state).
        """
        with torch.no_grad():
            trace = poutine.trace(self.model).get_trace(*self.model_args, **self.model_kwargs)
            constrained = {name: trace.nodes[name]["value"] for name in self.latent_names}
            z = {name: self.transforms[name](value) for name, value in constrained.items()}
            _, ll = self._split_trace(trace, z, constrained)
        return z, ll

    def _checked_init(self, site):
        fn = site["fn"]
        if fn.has_enumerate_support or fn.support.is_discrete:
            raise TypeError(
                f"latent site {site['name']!r} is discrete ({type(fn).__name__}); "
                "ParallelTempering samples continuous latents only: marginalize it out by hand "
                "or observe it"
            )
        return self.init_strategy(site)

    def _initial_trace(self):
        initialized = InitMessenger(self._checked_init)(self.model)
        return poutine.trace(initialized).get_trace(*self.model_args, **self.model_kwargs)

    def initial_point(self, max_tries=100):
        """
        A starting point from ``init_strategy`` where lp, ll and their gradient are finite.
        """
        for _ in range(max_tries):
            trace = self._initial_trace()
            z = {
                name: self.transforms[name](trace.nodes[name]["value"]).detach()
                for name in self.latent_names
            }
            for value in z.values():
                value.requires_grad_(True)
            lp, ll = self.log_densities(z)
            total = lp + ll
            if torch.isfinite(total):
                grads = torch.autograd.grad(total, list(z.values()))
                if all(torch.isfinite(g).all() for g in grads):
                    return {name: value.detach() for name, value in z.items()}
        strategy = getattr(self.init_strategy, "__name__", self.init_strategy)
        raise ValueError(
            f"found no initial point with a finite log density in {max_tries} tries of "
            f"init_strategy={strategy}; check the model's supports or pass initial_params / "
            "another init_strategy"
        )


class TemperedPotential:
    """
    Potential energy ``-(lp(z) + beta * ll(z))`` of one rung, as Pyro's HMC/NUTS expect.

    It remembers ``ll`` at the points it evaluates (keyed by the identity of their tensors,
    through weak references, so nothing is kept alive): the explorer returns one of those
    points, and the swaps need its ``ll`` without another trace of the model.

    A plain class rather than a closure so the kernel pickles for ``MCMC(num_chains>1)``.
    """

    def __init__(self, split, beta):
        self.split = split
        self.beta = beta
        self._seen = {}

    def __call__(self, z):
        lp, ll = self.split.log_densities(z)
        self._remember(z, ll)
        return -(lp + self.beta * ll)

    @staticmethod
    def _key(z):
        return tuple(id(v) for v in z.values())

    def _remember(self, z, ll):
        if len(self._seen) > 4096:  # drop points whose tensors are gone
            self._seen = {k: v for k, v in self._seen.items() if all(r() is not None for r in v[0])}
        refs = tuple(weakref.ref(v) for v in z.values())
        self._seen[self._key(z)] = (refs, ll.detach() if torch.is_tensor(ll) else ll)

    def known_log_likelihood(self, z):
        """``ll(z)`` if this potential evaluated exactly these tensors, else None."""
        entry = self._seen.get(self._key(z))
        if entry is None or any(r() is not v for r, v in zip(entry[0], z.values())):
            return None
        return float(entry[1])

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_seen"] = {}  # weak references do not pickle
        return state

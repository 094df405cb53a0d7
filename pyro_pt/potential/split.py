"""A Pyro model's log density in unconstrained space split into ``lp(z)`` and ``ll(z)``
(docs/design.md, "Likelihood-only tempering"), by Pyro's trace: the reference every faster
evaluation is checked against."""

import math

import torch
from torch.distributions import biject_to

import pyro.poutine as poutine
from pyro.infer.autoguide.initialization import InitMessenger, init_to_uniform

from .sites import (check_log_probs, improper_start_error, is_counted, is_improper,
                    is_invalid_point_error, random_subsamples, reweighted)


class ModelSplit:
    """
    The prior/likelihood split of one Pyro model for fixed ``model_args`` and
    ``model_kwargs``, from one trace at construction: the latent and observed sites and the
    transforms to unconstrained space (``biject_to(support).inv``, as Pyro's HMC uses).

    :param dict transforms: optional site -> transform overrides (constrained -> unconstrained).
    :param callable init_strategy: per-site initialization of that trace and of
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
        self._reweighted = []  # latent sites whose lp is not their distribution's log density
        # Each counted site's value in this trace, and the observed sites under a subsampled
        # plate (whose values change from trace to trace): a checkpoint's fingerprint.
        self.values, self.subsampled = {}, set()
        # Plates that draw a fresh random subsample every run: a kernel refuses them at set-up.
        self.random_subsamples = random_subsamples(trace)
        for name, site in trace.nodes.items():
            if not is_counted(site):
                continue
            self.values[name] = site["value"]
            if site["is_observed"]:
                self.observed_names.append(name)
                if any(getattr(f, "full_size", None) not in (None, f.size)
                       for f in site["cond_indep_stack"]):
                    self.subsampled.add(name)
                continue
            fn = site["fn"]
            self.latent_names.append(name)
            self._prior_fns[name] = fn
            if reweighted(site):
                self._reweighted.append(name)
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
        check_log_probs(trace)
        self.latent_names.sort()
        # Where the model keeps its latents: the device whose random stream the explorers use.
        self.device = trace.nodes[self.latent_names[0]]["value"].device

    def prior_refusal(self):
        """Why the prior cannot be drawn exactly (for beta = 0), naming the site, or None."""
        for name in self.latent_names:
            if is_improper(self._prior_fns[name]):
                return f"latent site {name!r} has an improper prior"
        if self._reweighted:
            # lp scores this site's log density times a scale or under a mask, which is not
            # the density of the distribution a trace of the model draws from: the prior
            # rung would sample a different prior from the one every other rung tempers.
            return (f"latent site {self._reweighted[0]!r} has its log density scaled or masked "
                    "(poutine.scale, poutine.mask or plate subsampling)")
        return None

    def check_proper_prior(self):
        """Raise unless every latent site has a proper prior one can draw from (for beta = 0)."""
        why = self.prior_refusal()
        if why is not None:
            raise ValueError(f"{why}, so the prior rung (temperature inf, beta = 0) cannot draw "
                             "exactly from the prior lp scores: give the site a proper, unscaled "
                             "prior or use a finite max_temperature (or temperatures without inf)")

    def constrain(self, z):
        return {name: self.transforms[name].inv(value) for name, value in z.items()}

    def sum_terms(self, log_probs, z, constrained):
        """
        ``(lp, ll)`` from each counted site's scaled, masked, summed log probability
        (``log_probs``), ``z`` and its ``constrained`` values: the one place the two sums are
        written, for the traced path and the captured graph
        (:func:`~pyro_pt.potential.densities.split_terms`) alike, so both add the same terms
        in the same order.
        """
        ll = self._sum_ll(log_probs)
        lp = 0.0
        for name in self.latent_names:
            lp = lp + log_probs[name]
            # Density of z = T(x): p(x) |d x / d z|, i.e. minus log|dT/dx|.
            lp = lp - self.transforms[name].log_abs_det_jacobian(constrained[name], z[name]).sum()
        return lp, ll

    def _sum_ll(self, log_probs):
        """``ll``: the observed sites' terms in their order, the one sum of them."""
        ll = 0.0
        for name in self.observed_names:
            ll = ll + log_probs[name]
        return ll

    def _split_trace(self, trace, z, constrained):
        trace.compute_log_prob(site_filter=lambda name, site: is_counted(site))
        log_probs = {name: trace.nodes[name]["log_prob_sum"]
                     for name in self.observed_names + self.latent_names}
        return self.sum_terms(log_probs, z, constrained)

    def log_densities(self, z):
        """``(lp(z), ll(z))`` for unconstrained values ``z`` (site -> tensor), in one trace."""
        constrained = self.constrain(z)
        conditioned = poutine.condition(self.model, data=constrained)
        try:
            trace = poutine.trace(conditioned).get_trace(*self.model_args, **self.model_kwargs)
            return self._split_trace(trace, z, constrained)
        except (ValueError, RuntimeError) as error:
            # With validation on, a NaN parameter or latent raises (in the model or in a
            # log_prob); so does a factorization of a matrix that is not positive-definite at
            # this point (torch.linalg.cholesky on a covariance built from latent values).
            # Either is a rejected point, not a crash.
            if not is_invalid_point_error(error):
                raise
            nan = sum(v.sum() for v in z.values()) * math.nan  # keeps autograd connected
            return nan, nan

    def log_likelihood(self, z):
        """``ll(z)`` as a float, without autograd."""
        with torch.no_grad():
            return float(self.log_densities(z)[1])

    def sample_prior(self):
        """An exact draw from the prior in unconstrained space and its log-likelihood, from one
        trace of the model (on the global torch random state)."""
        with torch.no_grad():
            trace = poutine.trace(self.model).get_trace(*self.model_args, **self.model_kwargs)
            constrained = {name: trace.nodes[name]["value"] for name in self.latent_names}
            z = {name: self.transforms[name](value) for name, value in constrained.items()}
            # Only ll is wanted: the latent sites' scores and Jacobians (lp) are not computed,
            # a third of a draw's CPU on the two-component mixture; ll is sum_terms' own sum.
            observed = set(self.observed_names)
            trace.compute_log_prob(site_filter=lambda name, site: name in observed
                                   and is_counted(site))
            ll = self._sum_ll({name: trace.nodes[name]["log_prob_sum"]
                               for name in self.observed_names})
        return z, ll

    def _checked_init(self, site):
        fn = site["fn"]
        if fn.has_enumerate_support or fn.support.is_discrete:
            raise TypeError(
                f"latent site {site['name']!r} is discrete ({type(fn).__name__}); "
                "ParallelTempering samples continuous latents only: marginalize it out by hand "
                "or observe it"
            )
        try:
            return self.init_strategy(site)
        except NotImplementedError as error:  # ImproperUniform.sample
            if not is_improper(fn):
                raise
            raise improper_start_error(site, self.init_strategy) from error

    def _initial_trace(self):
        initialized = InitMessenger(self._checked_init)(self.model)
        return poutine.trace(initialized).get_trace(*self.model_args, **self.model_kwargs)

    def initial_point(self, max_tries=100):
        """A starting point from ``init_strategy`` where lp, ll and their gradient are finite."""
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

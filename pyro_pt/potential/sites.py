"""What the split asks of a traced model's sites: which count in lp or ll, which are reweighted
or improper, whether each one's log density can be evaluated, and which plates draw a random
subsample of their data on every run.
"""

import torch

from pyro.distributions import ImproperUniform
from pyro.poutine.subsample_messenger import _Subsample

from pyro_arviz.sites import scored_log_prob


def is_counted(site):
    """Sample sites whose log density belongs in lp or ll (not deterministic, not plates)."""
    return (
        site["type"] == "sample"
        and not site["infer"].get("_deterministic", False)
        and not isinstance(site["fn"], _Subsample)
    )


def is_invalid_point_error(error):
    """Distribution validation failing on NaN/inf parameters or values out of support, or a
    linear-algebra failure (a Cholesky or solve of a matrix that is singular or not
    positive-definite at this point; Pyro's own HMC treats it as a divergence too)."""
    if isinstance(error, torch.linalg.LinAlgError):
        return True
    message = str(error)
    if isinstance(error, ValueError):
        return "found invalid values" in message or "must be within the support" in message
    return "singular U" in message or "not positive-definite" in message


def reweighted(site):
    """Whether a handler changed a site's log density (a scale other than 1, or a mask)."""
    scale, mask = site.get("scale", 1.0), site.get("mask")
    scaled = bool((scale != 1).any()) if torch.is_tensor(scale) else scale != 1.0
    masked = mask is not None and mask is not True and not bool(torch.as_tensor(mask).all())
    return scaled or masked


def is_improper(fn):
    while fn is not None:
        if isinstance(fn, ImproperUniform):
            return True
        fn = getattr(fn, "base_dist", None)
    return False


def check_log_probs(trace):
    """Each counted site's log density evaluated once, at set-up, so that a shape bug (a value
    that does not broadcast with its distribution) raises a ``ValueError`` naming the site and
    the shapes: with validation off (as MCMC runs) torch raises a bare RuntimeError from inside
    the distribution, which Pyro's trace does not annotate."""
    for name, site in trace.nodes.items():
        if not is_counted(site):
            continue
        try:
            scored_log_prob(site)
        except (ValueError, RuntimeError) as error:
            if is_invalid_point_error(error):
                continue  # a bad point, not a bad model: initial_point tries others
            fn, value = site["fn"], site["value"]
            kind = "observed" if site["is_observed"] else "latent"
            raise ValueError(
                f"the log density of {kind} site {name!r} fails: its {type(fn).__name__} has batch_shape "
                f"{tuple(fn.batch_shape)} and event_shape {tuple(fn.event_shape)}, its value has shape "
                f"{tuple(value.shape)} ({error}); make the distribution's parameters and the value "
                "broadcast, e.g. with .expand, .to_event or a pyro.plate of the data's size\n"
                + trace.format_shapes()
            ) from error


def random_subsamples(trace):
    """``{plate: (size, k, [sites in it])}`` of the plates of a trace that draw a random
    subsample of their indices on every run (``pyro.plate(name, size, subsample_size=k)``, k <
    size; a fixed ``subsample=`` is not one). Pyro's HMC and NUTS refuse them, as the split
    does: the log density they give changes from one evaluation to the next."""
    plates = {}
    for name, site in trace.nodes.items():
        fn = site.get("fn")
        if (site["type"] == "sample" and isinstance(fn, _Subsample)
                and fn.subsample_size is not None and fn.subsample_size < fn.size):
            plates[name] = (fn.size, fn.subsample_size, [])
    for name, site in trace.nodes.items():
        if is_counted(site):
            for frame in site["cond_indep_stack"]:
                if frame.name in plates:
                    plates[frame.name][2].append(name)
    return plates


def improper_start_error(site, strategy):
    """The error for an improper prior (``ImproperUniform``) that ``strategy`` tried to draw a
    starting value from: every strategy of :mod:`pyro.infer.autoguide.initialization` but
    ``init_to_value`` draws from the prior first."""
    name = site["name"]
    strategy = getattr(strategy, "__name__", strategy)
    return ValueError(
        f"latent site {name!r} has an improper prior ({type(site['fn']).__name__}), which cannot "
        f"be drawn from, and init_strategy={strategy} starts from a draw of the prior: pass "
        f"init_strategy=init_to_value(values={{{name!r}: <a starting value>}}) "
        "(pyro.infer.autoguide.initialization), as Pyro's NUTS needs too"
    )

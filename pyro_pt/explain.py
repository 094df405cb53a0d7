"""Plain words for what went wrong with a model: set-up failures, and why the captured graph
fell back to Pyro's trace. :func:`model_errors` looks at the model once more only after a
failure (so a healthy run draws exactly what it did) and raises an error that names the site
and says what to do.
"""

import contextlib

import torch

import pyro.poutine as poutine

_TRACED = "every evaluation traces the model with Pyro (slower, still exact)"


def fallback_reason(raw):
    """The captured graph's fallback reason ``raw`` (a capture or check message) in plain words;
    ``""`` stays ``""`` (no fallback)."""
    if not raw:
        return ""
    if "(private API)" in raw:  # pyro_pt.potential.torch_compat's reason says it all
        return raw
    if "_local_scalar_dense" in raw or "data-dependent" in raw or "latent-dependent value" in raw:
        why = ("the model branches on a latent value (Python control flow such as `if z > 0`), "
               "so its graph cannot be captured")
    elif "draws random numbers" in raw or "is random" in raw:
        why = "the model draws random numbers of its own, so one fixed graph cannot stand for it"
    elif "shape depends" in raw:
        why = "a tensor's shape depends on the latent values, so one fixed graph cannot hold it"
    elif "sample sites changed" in raw or "appears twice" in raw:
        why = "the model's sample sites differ between runs, so one fixed graph cannot hold it"
    elif "disagrees" in raw:
        why = ("the captured graph did not reproduce the model's log density at the check "
               "points (the model reads something that changes between runs)")
    else:
        why = "the model's graph could not be captured"
    return f"{why}; {_TRACED}"


def _observed_nan(model, args, kwargs):
    """``(site, count, size)`` of the first observed site whose values hold NaN, else None."""
    try:
        # Another run of the model, after the failure only; it must not move the run's streams.
        with torch.random.fork_rng(), torch.no_grad():
            trace = poutine.trace(model).get_trace(*args, **kwargs)
    except Exception:  # the model cannot even run once: the original error says more
        return None
    found = []
    for name, site in trace.nodes.items():
        if site["type"] != "sample":
            continue
        if site["is_observed"] and torch.is_tensor(site["value"]):
            nan = torch.isnan(site["value"])
            if nan.any():
                found.append((name, int(nan.sum()), nan.numel()))
        elif not site["is_observed"] and getattr(site["fn"], "support", None) is not None \
                and (site["fn"].support.is_discrete or site["fn"].has_enumerate_support):
            raise TypeError(discrete_latent_message(name, site["fn"]))
    return found[0] if found else None


def discrete_latent_message(name, fn):
    return (f"latent site {name!r} is discrete ({type(fn).__name__}): discrete latents are "
            "unsupported by ParallelTempering, which tempers continuous latents only; "
            "marginalize it out of the model (sum its values into the likelihood), or observe "
            "it. Pyro's NUTS can enumerate it (infer={'enumerate': 'parallel'}), but that "
            "chain cannot be tempered here")


def refuse_random_subsampling(split):
    """Raise ``NotImplementedError`` where a plate of ``split``'s model draws a random subsample
    of its data on every run (:func:`~pyro_pt.potential.sites.random_subsamples`), naming it,
    its sites and what to do; Pyro's HMC/NUTS refuse such a model too."""
    if not split.random_subsamples:
        return
    plate, (size, subsample_size, sites) = next(iter(split.random_subsamples.items()))
    raise NotImplementedError(
        f"plate {plate!r} draws a random subsample of {subsample_size} of its {size} indices on "
        f"every run of the model (subsample_size={subsample_size}; its sites {sites}), so each "
        "evaluation of the log density sees other data, and the explorers' and swaps' "
        "acceptance tests compare numbers of different targets. ParallelTempering, as Pyro's "
        "HMC/NUTS, samples one fixed posterior: use the whole data (leave out subsample_size); "
        "to subsample data too large for that, fit by stochastic variational inference "
        "(pyro.infer.SVI, e.g. with pyro_subnet.SubnetworkLaplace as the guide)"
    )


def _missing_site(split, error):
    """The error for a ``KeyError`` naming one of ``split``'s sites (found at setup), or None."""
    name = error.args[0] if error.args else None
    sites = (*split.latent_names, *split.observed_names)
    if name not in sites:
        return None
    return ValueError(
        f"sample site {name!r} was in the model's first run but is missing from a later one: "
        "ParallelTempering needs the same sample sites, by name, on every run of the model "
        f"(its sites at setup: {list(sites)}); name sites by something fixed, not a call "
        "counter or a random choice"
    )


@contextlib.contextmanager
def missing_sites(split):
    """Re-raise a ``KeyError`` naming one of ``split``'s sites as an error saying that the
    model's sites change between runs (cheap: for every scan); other errors pass unchanged."""
    try:
        yield
    except KeyError as error:
        better = _missing_site(split, error)
        if better is None:
            raise
        raise better from None


@contextlib.contextmanager
def model_errors(model, args, kwargs, split=None):
    """
    Re-raise a failure of the model's setup as an error that names the site and says what to
    do: a site missing from a later run of the model (with ``split``), a discrete latent, NaN
    in observed data. Other errors pass unchanged.
    """
    try:
        yield
    except Exception as error:
        better = _missing_site(split, error) if split and isinstance(error, KeyError) else None
        if better is not None:
            raise better from None
        nan = _observed_nan(model, args, kwargs)  # raises for a discrete latent
        if nan is None:
            raise
        name, count, size = nan
        raise ValueError(
            f"found NaN in the observed values of site {name!r} ({count} of {size}), so no "
            "point has a finite log density: drop or impute the missing data, or mask it "
            "(poutine.mask, or obs_mask=)"
        ) from error

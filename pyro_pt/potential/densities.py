"""The densities a captured graph computes: ``flat -> (lp, ll)`` and their gradients.

The model runs under a minimal messenger that substitutes the constrained latent values and
keeps each counted site's scaled, masked log probability; :meth:`ModelSplit.sum_terms
<pyro_pt.potential.split.ModelSplit.sum_terms>` adds them as the traced path does. Distribution
validation keeps its meaning inside a graph: each check that would raise becomes a flag, and
the densities are NaN where one is false, as the traced path's are where validation raises.
"""

import contextlib
import math

import torch
from torch.func import grad_and_value

from pyro.poutine.messenger import Messenger

from pyro_arviz.sites import scored_log_prob

from . import torch_compat
from .capture import Uncapturable, validation_setting
from .sites import is_counted


class _Substitute(Messenger):
    """Sets the latent sites' values and keeps each counted site's scaled, masked log prob sum."""

    def __init__(self, values):
        super().__init__()
        self.values = values
        self.log_probs = {}

    def _process_message(self, msg):
        # What poutine.condition does, minus the bookkeeping of a trace.
        if msg["type"] == "sample" and msg["name"] in self.values:
            msg["value"] = self.values[msg["name"]]
            msg["is_observed"] = True

    def _postprocess_message(self, msg):
        if not is_counted(msg):
            return
        name = msg["name"]
        if name in self.log_probs:
            raise Uncapturable(f"sample site {name!r} appears twice in one model run")
        self.log_probs[name] = scored_log_prob(msg).sum()


@contextlib.contextmanager
def _validation_as_flags(flags):
    """
    The raising checks of distribution validation (``torch._is_all_true(valid)``) recorded as
    flags while a graph is captured (a raise needs the value in Python, which a graph cannot
    have). Where that private function is missing, a model that validates is Uncapturable.
    """

    def record(valid):
        flags.append(torch.as_tensor(valid).all())
        return True

    with torch_compat.replaced("_is_all_true", record) as missing:
        if missing and validation_setting():
            raise Uncapturable(missing)
        yield


def counted_validation(counts):
    """The checks that :func:`_validation_as_flags` turns into flags counted in ``counts[0]``
    (a one-element list), each still deciding as before: how many flags a graph captured from
    the same model run must hold; a graph that lost one would be finite where the model is
    invalid."""
    original = torch_compat.lookup("_is_all_true")[0]

    def count(valid):
        counts[0] += 1
        return original(valid)

    # where it is missing no graph is captured with validation on, so nothing is to count
    return torch_compat.replaced("_is_all_true", count)


def split_terms(split, layout, flat):
    """``(lp, ll)`` at the flat unconstrained point ``flat``, through :class:`_Substitute` and
    the traced path's sum."""
    z = layout.unflatten(flat)
    constrained = split.constrain(z)
    with _Substitute(constrained) as recorder:
        split.model(*split.model_args, **split.model_kwargs)
    terms = recorder.log_probs
    expected = set(split.latent_names) | set(split.observed_names)
    if set(terms) != expected:
        raise Uncapturable(
            f"the model's sample sites changed: expected {sorted(expected)}, got {sorted(terms)}"
        )
    return split.sum_terms(terms, z, constrained)


def _flagged(split, layout, flat, counts):
    flags = []
    with _validation_as_flags(flags):
        lp, ll = split_terms(split, layout, flat)
    counts.append(len(flags))
    valid = torch.stack(flags).all() if flags else None
    return lp, ll, valid


def _nan_unless(valid, value):
    if valid is None:
        return value
    return torch.where(valid, value, torch.full_like(value, math.nan))


def densities(split, layout):
    """``flat -> (lp, ll)`` (NaN where validation would raise), to be captured; its
    ``flag_counts`` lists the number of flags of each model run it made."""

    def fn(flat):
        lp, ll, valid = _flagged(split, layout, flat, fn.flag_counts)
        return _nan_unless(valid, lp), _nan_unless(valid, ll)

    fn.flag_counts = []
    return fn


def densities_and_grads(split, layout):
    """``flat -> (lp, ll, d lp / d flat, d ll / d flat)``, to be captured; ``flag_counts`` as in
    :func:`densities`, of the ll pass, whose flags judge both. The model runs once per
    gradient; the network in the lp pass feeds nothing returned, so dead-code elimination of the
    captured graph removes it."""

    def lp_fn(flat):
        with _validation_as_flags([]):
            return split_terms(split, layout, flat)[0]

    def ll_fn(flat):
        _, ll, valid = _flagged(split, layout, flat, fn.flag_counts)
        # torch.func's aux output must hold tensors: no flags (validation off) is "all valid".
        return ll, (valid if valid is not None else torch.ones((), dtype=torch.bool))

    def fn(flat):
        grad_lp, lp = grad_and_value(lp_fn)(flat)
        grad_ll, (ll, valid) = grad_and_value(ll_fn, has_aux=True)(flat)
        return _nan_unless(valid, lp), _nan_unless(valid, ll), grad_lp, grad_ll

    fn.flag_counts = []
    return fn

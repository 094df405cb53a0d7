"""Capture a Pyro model's prior/likelihood split as a straight-line graph of tensor operations.

The model runs once under :func:`torch.fx.experimental.proxy_tensor.make_fx`, with a minimal
messenger that substitutes the constrained latent values and sums the log probabilities of the
sample sites (with their plate-subsampling, ``poutine.scale`` and ``poutine.mask`` factors, as
``Trace.compute_log_prob`` applies them). What is recorded is the aten graph of

    lp(z) = sum_latent [log p(x_s) - log|dT_s/dx_s|] ,    ll(z) = sum_observed log p(y_o | x)

for ``x = T^-1(z)``, and, through :func:`torch.func.grad_and_value`, of their gradients: no
Pyro messenger, Trace or distribution object is left at evaluation time. A graph is refused
(:class:`Uncapturable`) when the model reads a latent value back into Python (control flow on
it), draws random numbers, or makes a tensor whose shape depends on the latent values.

Distribution validation keeps its meaning inside the graph: each check that would raise
(``torch._is_all_true`` in :class:`torch.distributions.Distribution`) becomes a flag, and the
densities are NaN where a flag is false, which is what :meth:`ModelSplit.log_densities` returns
where validation raises.
"""

import contextlib
import math
import warnings

import torch
from torch.func import grad_and_value
from torch.fx.experimental.proxy_tensor import make_fx

from pyro.distributions.util import scale_and_mask
from pyro.poutine.messenger import Messenger

from .tempering import _is_counted

_REFUSED_TAGS = {
    torch.Tag.nondeterministic_seeded: "draws random numbers",
    torch.Tag.dynamic_output_shape: "makes a tensor whose shape depends on the latent values",
    torch.Tag.data_dependent_output: "reads a latent-dependent value back into Python",
}


def mismatch(value, reference, rtol):
    """None if ``value`` agrees with ``reference`` (same NaN and inf entries, finite ones within
    ``rtol`` of the largest), else a description of the difference."""
    value, reference = value.detach().to(reference.dtype), reference.detach()
    if not torch.equal(torch.isnan(value), torch.isnan(reference)) or not torch.equal(
        torch.isinf(value), torch.isinf(reference)
    ):
        return "their NaN or infinite entries differ"
    finite = torch.isfinite(reference)
    if torch.equal(value[finite], reference[finite]):
        return None
    error = float((value[finite] - reference[finite]).abs().max())
    scale = float(reference[finite].abs().max())
    if error > rtol * scale:
        return f"relative difference {error / scale:.2e} > {rtol:.0e}"
    return None


def forked_rng(device=None):
    """The global random state (CPU, and ``device`` if it is a GPU) restored on exit: setting up
    the fast path must not shift the user's random stream."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


class Uncapturable(Exception):
    """The model cannot be evaluated as one fixed graph; the message says why."""


class FlatLayout:
    """
    The latent sites in a fixed order, flattened into one vector (each site ``.reshape(-1)``).

    :param list names: site names, in the order of the flat vector.
    :param list shapes: the sites' shapes.
    """

    def __init__(self, names, shapes):
        self.names = list(names)
        self.shapes = [torch.Size(shape) for shape in shapes]
        self.sizes = [shape.numel() for shape in self.shapes]
        self.dim = sum(self.sizes)

    def flatten(self, z):
        return torch.cat([z[name].reshape(-1) for name in self.names])

    def unflatten(self, flat):
        """Site values from ``flat`` of shape ``batch_shape + (dim,)``."""
        parts = flat.split(self.sizes, dim=-1)
        batch = flat.shape[:-1]
        return {n: p.reshape(batch + s) for n, p, s in zip(self.names, parts, self.shapes)}


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
        if not _is_counted(msg):
            return
        name = msg["name"]
        if name in self.log_probs:
            raise Uncapturable(f"sample site {name!r} appears twice in one model run")
        log_p = msg["fn"].log_prob(msg["value"], *msg["args"], **msg["kwargs"])
        self.log_probs[name] = scale_and_mask(log_p, msg["scale"], msg["mask"]).sum()


@contextlib.contextmanager
def _validation_as_flags(flags):
    """
    Turn the raising checks of torch distribution validation into recorded flags (only while a
    graph is captured: a raise needs the value in Python, which a graph cannot have).
    """
    original = torch._is_all_true

    def record(valid):
        flags.append(torch.as_tensor(valid).all())
        return True

    torch._is_all_true = record
    try:
        yield
    finally:
        torch._is_all_true = original


def split_terms(split, layout, flat):
    """
    ``(lp, ll)`` at the flat unconstrained point ``flat``, summed in the order of
    :meth:`ModelSplit._split_trace`, through a :class:`_Substitute` messenger.
    """
    z = layout.unflatten(flat)
    transforms = split.transforms
    constrained = {name: transforms[name].inv(value) for name, value in z.items()}
    with _Substitute(constrained) as recorder:
        split.model(*split.model_args, **split.model_kwargs)
    terms = recorder.log_probs
    expected = set(split.latent_names) | set(split.observed_names)
    if set(terms) != expected:
        raise Uncapturable(
            f"the model's sample sites changed: expected {sorted(expected)}, got {sorted(terms)}"
        )
    lp = ll = 0.0
    for name in split.observed_names:
        ll = ll + terms[name]
    for name in split.latent_names:
        lp = lp + terms[name]
        lp = lp - transforms[name].log_abs_det_jacobian(constrained[name], z[name]).sum()
    return lp, ll


def _flagged(split, layout, flat):
    flags = []
    with _validation_as_flags(flags):
        lp, ll = split_terms(split, layout, flat)
    valid = torch.stack(flags).all() if flags else None
    return lp, ll, valid


def _nan_unless(valid, value):
    if valid is None:
        return value
    return torch.where(valid, value, torch.full_like(value, math.nan))


def densities(split, layout):
    """``flat -> (lp, ll)`` (NaN where validation would raise), to be captured."""

    def fn(flat):
        lp, ll, valid = _flagged(split, layout, flat)
        return _nan_unless(valid, lp), _nan_unless(valid, ll)

    return fn


def densities_and_grads(split, layout):
    """
    ``flat -> (lp, ll, d lp / d flat, d ll / d flat)``, to be captured.

    The model runs twice, once per gradient; the network in the lp pass feeds nothing that is
    returned, so dead-code elimination of the captured graph removes it.
    """

    def lp_fn(flat):
        with _validation_as_flags([]):
            return split_terms(split, layout, flat)[0]

    def ll_fn(flat):
        _, ll, valid = _flagged(split, layout, flat)
        # torch.func's aux output must hold tensors: no flags (validation off) is "all valid".
        return ll, (valid if valid is not None else torch.ones((), dtype=torch.bool))

    def fn(flat):
        grad_lp, lp = grad_and_value(lp_fn)(flat)
        grad_ll, (ll, valid) = grad_and_value(ll_fn, has_aux=True)(flat)
        return _nan_unless(valid, lp), _nan_unless(valid, ll), grad_lp, grad_ll

    return fn


def _check_operations(graph):
    """
    Refuse random operations, and operations whose output shape or Python value depends on
    the latent values (a boolean mask index made from z; a constant mask, e.g. a triangular
    one, keeps its shape).
    """
    variable = set()
    for node in graph.nodes:
        if node.op == "placeholder" or any(i in variable for i in node.all_input_nodes):
            variable.add(node)
        tags = getattr(node.target, "tags", ()) if node.op == "call_function" else ()
        for tag, why in _REFUSED_TAGS.items():
            if tag not in tags:
                continue
            if tag is not torch.Tag.nondeterministic_seeded:
                shaping = node.all_input_nodes
                if node.target is torch.ops.aten.index.Tensor:  # only mask indices shape it
                    shaping = [i for i in node.args[1] if i is not None
                               and i.meta["val"].dtype in (torch.bool, torch.uint8)]
                if not any(i in variable for i in shaping):
                    continue
            raise Uncapturable(f"the model {why} ({node.target})")


def _fold_constants(gm):
    """
    Compute once what does not depend on the latent values: the constants the model makes at
    every call (a prior's ``torch.tensor(0.)``, its expansion, the validation checks of it).
    """
    graph = gm.graph
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            graph.eliminate_dead_code()
            gm.recompile()
            return  # an in-place operation could change a folded constant between calls
    values = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            values[node] = getattr(gm, node.target)
        elif node.op == "call_function" and all(i in values for i in node.all_input_nodes):
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
            with torch.no_grad():
                values[node] = node.target(*args, **kwargs)
    for i, node in enumerate(list(graph.nodes)):
        if node.op != "call_function" or node not in values or not torch.is_tensor(values[node]):
            continue
        if all(user in values for user in node.users):
            continue  # used only by other constants (or not at all)
        name = f"_folded_{i}"
        gm.register_buffer(name, values[node].detach())
        with graph.inserting_before(node):
            node.replace_all_uses_with(graph.get_attr(name))
    graph.eliminate_dead_code()
    gm.recompile()


def _checked_tolist(tolist):
    def checked(tensor):
        if torch._C._functorch.is_functorch_wrapped_tensor(tensor):
            tensor.item()  # refused under grad: the values would be read outside the graph
        return tolist(tensor)

    return checked


@contextlib.contextmanager
def _reads_through_dispatch(refusals):
    """
    Refuse the Python reads of latent-dependent values that bypass the dispatcher (a branch on
    them would be frozen at capture, unseen by :func:`_check_operations`): ``tolist`` and the
    text (``repr``, ``print``) of a tensor under ``torch.func.grad`` read its unwrapped values.
    ``tolist`` of such a tensor is refused as ``item`` is; of a constant it works as before. The
    text is replaced and noted in ``refusals`` (raising there would leave functorch disabled
    while the exception's traceback lives).
    """
    import torch._tensor_str as tensor_str

    tolist, wrapper_str = torch.Tensor.tolist, tensor_str._functorch_wrapper_str_intern

    def refuse_text(tensor, *, tensor_contents=None):
        refusals.append("the model formats a latent-dependent tensor as text (repr, print), "
                        "which reads its values outside the graph")
        return "<tensor being captured>"

    torch.Tensor.tolist = _checked_tolist(tolist)
    tensor_str._functorch_wrapper_str_intern = refuse_text
    try:
        yield
    finally:
        torch.Tensor.tolist = tolist
        tensor_str._functorch_wrapper_str_intern = wrapper_str


def capture(fn, *example):
    """
    The aten graph of ``fn`` at ``example`` as a ``GraphModule``, or :class:`Uncapturable`.
    """
    refusals = []
    try:
        with torch.no_grad(), _reads_through_dispatch(refusals):
            gm = make_fx(fn)(*example)
    except Uncapturable:
        raise
    except Exception as error:  # make_fx refuses data-dependent control flow by raising
        raise Uncapturable(f"capture failed: {type(error).__name__}: {error}") from error
    if refusals:
        raise Uncapturable(refusals[0])
    _check_operations(gm.graph)
    _fold_constants(gm)
    for name, value in list(vars(gm).items()):
        if torch.is_tensor(value) and value.requires_grad:
            # e.g. nn.Parameters of a PyroModule: constants here, only z is differentiated.
            setattr(gm, name, value.detach())
    return gm


def compile_graph(gm, *example):
    """
    ``gm`` run by the TorchScript interpreter (C++, no Python per operation) when it traces,
    else ``gm`` itself. The graph is straight-line, so tracing it cannot miss a branch.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
            return torch.jit.trace(gm, example, check_trace=False), "jit"
    except Exception:
        return gm, "fx"


def compile_vmapped(gm, example):
    """
    ``torch.func.vmap(gm)`` for the batch shape of ``example``, traced into one TorchScript
    graph (``gm`` is straight-line, so tracing its vmap is exact), else captured and compiled.
    """
    batched = torch.func.vmap(gm)
    with forked_rng(example.device), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
        try:
            return torch.jit.trace(batched, (example,), check_trace=False)
        except Exception:
            return compile_graph(capture(batched, example), example)[0]

"""Capture a Pyro model's split as a straight-line graph of aten operations, and compile it.

The model runs once under :func:`torch.fx.experimental.proxy_tensor.make_fx`; what it computes
is :mod:`pyro_pt.potential.densities`. No Pyro messenger, trace or distribution object is left
at evaluation time. A graph is refused (:class:`Uncapturable`) when the model reads a latent
value back into Python (control flow on it), draws random numbers, or makes a tensor whose
shape depends on the latent values. This module holds the mechanics: capture, the refusals,
constant folding, compilation and the comparison of a graph's numbers with the traced path's.
"""

import contextlib
import warnings

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pyro.distributions.util import is_validation_enabled

from . import torch_compat
from .inductor import inductor_compile

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


@contextlib.contextmanager
def keeping_validation():
    """The user's distribution validation setting restored on exit: the first ``torch.compile``
    of a process turns it off for the whole process (``TorchPatcher.patch``), which must not
    change what the traced path, and every graph captured afterwards, does at an invalid
    point."""
    setting = validation_setting()
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(setting)


def validation_setting():
    """Whether torch distributions validate by default: torch's own setting (a private class
    attribute), else Pyro's, which ``pyro.enable_validation`` keeps equal to it."""
    setting, missing = torch_compat.lookup("Distribution._validate_args")
    return bool(is_validation_enabled() if missing else setting)


class Uncapturable(Exception):
    """The model cannot be evaluated as one fixed graph; the message says why."""


def _check_operations(graph):
    """Refuse random operations, and operations whose output shape or Python value depends on
    the latent values (a boolean mask index made from z; a constant mask keeps its shape)."""
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
    """Compute once what does not depend on the latent values (a prior's ``torch.tensor(0.)``,
    its expansion, the validation checks of it)."""
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
    wrapped, missing = torch_compat.lookup("is_functorch_wrapped_tensor")

    def checked(tensor):
        if missing:  # which tensors depend on the latent values cannot be told: refuse all
            raise Uncapturable(f"the model calls tolist(), and {missing}")
        if wrapped(tensor):
            tensor.item()  # refused under grad: the values would be read outside the graph
        return tolist(tensor)

    return checked


@contextlib.contextmanager
def _reads_through_dispatch(refusals):
    """
    Refuse the reads of latent-dependent values that bypass the dispatcher (a branch on them
    would be frozen at capture, unseen by :func:`_check_operations`): ``tolist`` of such a
    tensor is refused as ``item`` is (of a constant it works); its text (``repr``, ``print``)
    is replaced and noted in ``refusals`` (raising there would leave functorch disabled while
    the exception's traceback lives).
    """
    tolist = torch.Tensor.tolist

    def refuse_text(tensor, *, tensor_contents=None):
        refusals.append("the model formats a latent-dependent tensor as text (repr, print), "
                        "which reads its values outside the graph")
        return "<tensor being captured>"

    torch.Tensor.tolist = _checked_tolist(tolist)
    try:
        # where the text's function is gone, the checks against the traced model remain
        with torch_compat.replaced("_functorch_wrapper_str_intern", refuse_text):
            yield
    finally:
        torch.Tensor.tolist = tolist


@contextlib.contextmanager
def _one_fake_mode():
    """
    One fake-tensor mode for the whole capture, in a tracing context (where ``make_fx`` looks
    first). Without one ``make_fx`` makes a mode per node, each recording its Python stack:
    about half of a small model's capture (eight schools, 207 nodes: ~0.3 of ~0.6 s). The graph
    is the same.
    """
    context = torch_compat.lookup("TracingContext")[0]
    tracing = torch_compat.lookup("tracing")[0]
    fake_mode = torch_compat.lookup("FakeTensorMode")[0]
    if None in (context, tracing, fake_mode) or context.try_get() is not None:
        # a private API missing: a fake mode per node (slower, the same graph); or inside
        # someone else's compilation, whose context is kept
        yield
        return
    with tracing(context(fake_mode(allow_fallback_kernels=True))):
        yield


def capture(fn, *example):
    """The aten graph of ``fn`` at ``example`` as a ``GraphModule``, or :class:`Uncapturable`."""
    refusals = []
    try:
        with torch.no_grad(), _reads_through_dispatch(refusals), _one_fake_mode():
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
    """``(gm traced by TorchScript, "jit")`` (straight-line, so tracing misses no branch), else
    ``(gm, "fx")``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
            return torch.jit.trace(gm, example, check_trace=False), "jit"
    except Exception:
        return gm, "fx"


def compile_vmapped(gm, example, compiler="torchscript"):
    """``torch.func.vmap(gm)`` for the batch shape of ``example``: with ``compiler="inductor"``
    captured and compiled by Inductor, else (or where that fails) traced by TorchScript, else
    captured and traced."""
    batched = torch.func.vmap(gm)
    with forked_rng(example.device), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
        if compiler == "inductor":
            try:
                with keeping_validation():
                    return inductor_compile(capture(batched, example), example)
            except Exception:  # the batched evaluator's checks judge what runs instead
                pass
        graph, engine = compile_graph(batched, example)
        return graph if engine == "jit" else compile_graph(capture(batched, example), example)[0]

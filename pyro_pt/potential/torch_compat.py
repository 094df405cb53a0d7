"""The private torch (and Pyro) APIs the fast paths use, looked up in one place.

Every fast path of the potential rests on public torch where it can; a few gains need names
that torch does not promise to keep. Each is looked up through :func:`lookup`, which returns
``(value, None)`` or, where the name is missing or no longer behaves as relied on, ``(None,
reason)``: the reason names the API and what the run does instead, and the caller takes that
public path. A kernel's set-up collects the reasons (:func:`recording`) into
``explorer_info["private_api"]``. What each API is for and what runs without it: :data:`TABLE`
(and docs/performance.md, "Private torch APIs and their fallbacks");
``tests/pt/test_torch_compat.py`` stubs each entry away, checks its fallback, and checks that
every entry resolves on the installed torch.
"""

import collections
import contextlib
import importlib

import torch

# module: imported; attribute: a dotted path inside it; fallback: what the run does without it;
# check: None, or (test of the value, what it tests) for an API that must also behave as relied on
Entry = collections.namedtuple("Entry", "module attribute fallback check", defaults=(None,))


def _looks_up(name, owner=None):
    """A check that a function (the value, or ``owner()``) still looks ``name`` up by name."""
    def check(value):
        function = value if owner is None else owner()
        return name in getattr(getattr(function, "__code__", None), "co_names", ())
    return check


_INDUCTOR = "TorchScript runs the graph instead of Inductor"
_FAKE = ("TorchScript runs the graph instead of Inductor, and make_fx makes a fake mode per node "
         "(a slower capture, the same graph)")
_ALLOC = ("the compiled graph is called through its Python shim, and the lockstep loop runs in "
          "Python")

TABLE = {
    # Inductor on the captured aten graph, without Dynamo's frame evaluation and guards per call
    "inductor.compile": Entry("torch._inductor", "compile", _INDUCTOR),
    # fake inputs for Inductor; one fake mode for a whole capture (make_fx otherwise makes one
    # per node, each recording a Python stack: half of a small model's capture)
    "FakeTensorMode": Entry("torch._subclasses.fake_tensor", "FakeTensorMode", _FAKE),
    # without a shape environment Inductor bypasses its on-disk graph cache
    "ShapeEnv": Entry("torch.fx.experimental.symbolic_shapes", "ShapeEnv", _INDUCTOR),
    # where make_fx looks for the capture's one fake mode
    "TracingContext": Entry("torch._guards", "TracingContext",
                            "make_fx makes a fake mode per node (a slower capture)"),
    "tracing": Entry("torch._guards", "tracing",
                     "make_fx makes a fake mode per node (a slower capture)"),
    "OutputCode": Entry("torch._inductor.output_code", "OutputCode",
                        "the compiled graph is called through AOTAutograd's wrappers"),
    # tensors to the generated C++ entry point's handles and back, as its Python shim does
    "unsafe_alloc_void_ptrs_from_tensors": Entry(
        "torch._C._aoti", "unsafe_alloc_void_ptrs_from_tensors", _ALLOC),
    "alloc_tensors_by_stealing_from_void_ptrs": Entry(
        "torch._C._aoti", "alloc_tensors_by_stealing_from_void_ptrs", _ALLOC),
    # builds matmul.cpp and the C++ lockstep loop with Inductor's compiler set-up
    "CppCodeCache": Entry("torch._inductor.codecache", "CppCodeCache",
                          "MKL runs the matrix products, and the lockstep loop runs in Python"),
    "custom_ops_to_c_shims": Entry(
        "torch._inductor.config", "aot_inductor.custom_ops_to_c_shims",
        "the generated code calls the native products through the dispatcher"),
    # tolist and the text (repr, print) of a tensor under torch.func.grad read its values past
    # the dispatcher
    "is_functorch_wrapped_tensor": Entry(
        "torch._C._functorch", "is_functorch_wrapped_tensor",
        "any tolist() in the model stops its capture (the model is traced)"),
    "_functorch_wrapper_str_intern": Entry(
        "torch._tensor_str", "_functorch_wrapper_str_intern",
        "the text of a latent-dependent tensor is not refused at capture (the checks against "
        "the traced model still run)"),
    # distribution validation's raising check, answered by a flag while a graph is captured
    "_is_all_true": Entry(
        "torch", "_is_all_true",
        "with distribution validation on, the model is traced instead of captured",
        (_looks_up("_is_all_true", lambda: torch.distributions.Distribution.__init__),
         "torch.distributions.Distribution no longer calls it")),
    # the first Inductor compilation of a process turns validation off
    "Distribution._validate_args": Entry(
        "torch.distributions", "Distribution._validate_args",
        "Pyro's validation setting is the one restored after compiling"),
    # set to True, Inductor trusts the CPU's report of its vector instructions instead of
    # building and loading a test program for each (a compiler that cannot build for the CPU
    # fails the compilation, and TorchScript runs the graph)
    "vec_isa_ok": Entry(
        "torch._inductor.config", "cpp.vec_isa_ok",
        "Inductor builds test programs to check the CPU's vector instructions (8-11 s of a "
        "machine's first compilation, ~1 s a process after)"),
    # where Inductor keeps its on-disk caches: compile='auto' records its compilations beside
    "cache_dir": Entry(
        "torch._inductor.runtime.cache_dir_utils", "cache_dir",
        "compile='auto' records no compilation, and expects each to cost a cold one"),
    # Pyro's leapfrog step must look potential_grad up in its module for the graph's hook
    "_single_step_verlet": Entry(
        "pyro.ops.integrator", "_single_step_verlet",
        "Pyro's leapfrog takes its gradients from autograd (slower, the same numbers)",
        (_looks_up("potential_grad"), "it no longer looks up potential_grad by name")),
}

_recorders = []  # the reason lists of the open recording() blocks
# (module, attribute) -> (owner, name): a lookup can sit on a hot path (a graph's validation
# key is read at every evaluation)
_owners = {}


def _owner(entry):
    """The object holding ``entry``'s value, and the value's name in it."""
    key = entry.module, entry.attribute
    if key not in _owners:
        *path, name = entry.attribute.split(".")
        owner = importlib.import_module(entry.module)
        for part in path:
            owner = getattr(owner, part)
        _owners[key] = owner, name
    return _owners[key]


def _resolve(entry):
    """The value ``entry`` names; raises ImportError or AttributeError where it is missing."""
    owner, name = _owner(entry)
    return getattr(owner, name)


def _version(module):
    library = "pyro" if module.startswith("pyro") else "torch"
    return f"{library} {importlib.import_module(library).__version__}"


def lookup(name):
    """
    ``(value, None)`` for the private API ``name`` (a key of :data:`TABLE`), or ``(None,
    reason)`` where it is missing or changed: the reason says which API, in which torch, and
    what the run does instead. The reason is also noted in every open :func:`recording`.
    """
    entry = TABLE[name]
    try:
        value = _resolve(entry)
    except (ImportError, AttributeError):
        what = "not found"
    else:
        if entry.check is None or entry.check[0](value):
            return value, None
        what = "changed"
    path, version = f"{entry.module}.{entry.attribute}", _version(entry.module)
    how = f" ({entry.check[1]})" if what == "changed" else ""
    reason = f"{path} (private API) {what} in {version}{how}: {entry.fallback}"
    for reasons in _recorders:
        if reason not in reasons:
            reasons.append(reason)
    return None, reason


def trusting_the_cpu():
    """A block in which Inductor takes the vector instructions the CPU reports without
    building test programs for them (``vec_isa_ok``); its C++ builds go inside it. Measured
    on the seed BNN's Inductor set-up (``benchmarks/compile_cost.py``, idle 2-core CPU):
    25.9 s cold instead of 32.9, 5.3 s warm instead of 7.3."""
    return replaced("vec_isa_ok", True)


@contextlib.contextmanager
def replaced(name, new):
    """Within the block, the private API ``name`` replaced by ``new`` where :func:`lookup`
    finds it; gives None, or the reason where it is left alone (missing or changed)."""
    old, missing = lookup(name)
    if missing:
        yield missing
        return
    owner, attribute = _owner(TABLE[name])
    setattr(owner, attribute, new)
    try:
        yield None
    finally:
        setattr(owner, attribute, old)


@contextlib.contextmanager
def recording():
    """Within the block, the reasons of the lookups that fail, collected in the list it gives
    (each once, in order)."""
    reasons = []
    _recorders.append(reasons)
    try:
        yield reasons
    finally:
        _recorders.remove(reasons)

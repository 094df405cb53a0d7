"""The lockstep loop in C++: the calls of a compiled step without Python between them.

Called from Python, each lockstep call (:mod:`pyro_pt.potential.lockstep`) turns its ~15 tensors
into handles for the generated C++ and wraps its 6 outputs back into tensors: on the 25-weight
BNN of ``benchmarks/vs_numpyro_ess.py`` about 4 of a call's ~18.6 us (cProfile of a sampling
run). :func:`native_loop` hands the arguments over once per trajectory: a small C function,
built once per machine by Inductor's C++ cache, calls the generated entry point once per step,
each call's outputs the next one's carried inputs. It is used only where it gives bitwise the
Python loop's results at set-up (``lockstep._checked_loop``).

Measured gain, end to end (``benchmarks/ablation.py --rounds 8 --workloads bc --settings "all
on,native loop"``: whole PT runs, one thread, an idle 2-core machine): without it the 25-weight
BNN's sampling phase (K = 4, lockstep) takes 1.03-1.45x as long, median 1.21 over 8 rounds; on
eight schools no gain shows within the noise (0.84-1.31, median 0.98). Kept.
"""

import ctypes

from . import torch_compat
from .direct_call import closure

_SOURCE = r"""
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <cstdint>
#include <cstring>
#include <exception>
#include <vector>

typedef void (*entry_t)(AtenTensorHandle*, AtenTensorHandle*);

// `steps` calls of `entry`: call k takes new handles of head, ticks[k], count and given (the
// entry steals its inputs) and the carried handles, which the call's outputs replace.
extern "C" int pyro_pt_lockstep_loop(void* entry_ptr, int64_t steps, AtenTensorHandle* head,
    int64_t num_head, AtenTensorHandle* ticks, AtenTensorHandle count,
    AtenTensorHandle* carried, int64_t num_carried, AtenTensorHandle* given, int64_t num_given,
    char* error, int64_t error_size) {
  entry_t entry = reinterpret_cast<entry_t>(entry_ptr);
  std::vector<AtenTensorHandle> inputs(num_head + 2 + num_carried + num_given);
  std::vector<AtenTensorHandle> outputs(num_carried);
  try {
    for (int64_t k = 0; k < steps; ++k) {
      int64_t j = 0;
      for (int64_t h = 0; h < num_head; ++h) aoti_torch_new_tensor_handle(head[h], &inputs[j++]);
      aoti_torch_new_tensor_handle(ticks[k], &inputs[j++]);
      aoti_torch_new_tensor_handle(count, &inputs[j++]);
      for (int64_t c = 0; c < num_carried; ++c) inputs[j++] = carried[c];
      for (int64_t g = 0; g < num_given; ++g) aoti_torch_new_tensor_handle(given[g], &inputs[j++]);
      entry(inputs.data(), outputs.data());
      for (int64_t c = 0; c < num_carried; ++c) carried[c] = outputs[c];
    }
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), error_size - 1);
    return 1;
  }
  return 0;
}
"""
# void inductor_entry_impl(AtenTensorHandle*, AtenTensorHandle*), the generated code's C++
# entry point (what its Python binding calls)
_ENTRY_SYMBOL = "_Z19inductor_entry_implPP16AtenTensorOpaqueS1_"

_helper = []  # [the loaded C function, or None where it cannot be built]


def _load_helper():
    if not _helper:
        cache = torch_compat.lookup("CppCodeCache")[0]
        try:
            # PyDLL: called with the GIL held, which the entry point releases itself
            with torch_compat.trusting_the_cpu():
                library = cache.load(_SOURCE)
            function = ctypes.PyDLL(library._name).pyro_pt_lockstep_loop
            function.restype = ctypes.c_int
            _helper.append(function)
        except Exception:  # no compiler, another torch's headers, no CppCodeCache (None)
            _helper.append(None)
    return _helper[0]


def _capsule_functions():
    """Python's ``PyCapsule_GetPointer`` and ``PyCapsule_New`` as private prototypes (setting
    the types on ``ctypes.pythonapi``'s own would change them for the whole process)."""
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                            ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
    return get, new


def native_loop(run):
    """``loop(head, ticks, count, carried, given) -> carried``: ``len(ticks)`` calls of the
    generated code behind ``run`` (:func:`~pyro_pt.potential.direct_call.entry_point`'s call)
    with inputs ``[*head, tick, count, *carried, *given]``, each call's outputs carried into
    the next; None where the C++ entry point or the loop cannot be had."""
    handles = torch_compat.lookup("unsafe_alloc_void_ptrs_from_tensors")[0]
    tensors = torch_compat.lookup("alloc_tensors_by_stealing_from_void_ptrs")[0]
    if handles is None or tensors is None:
        return None
    try:
        binding = closure(run)["entry"]
        entry = ctypes.cast(ctypes.CDLL(binding.__self__.__file__)[_ENTRY_SYMBOL],
                            ctypes.c_void_p).value
    except Exception:  # not a cpp_wrapper entry as expected
        return None
    helper = _load_helper()
    if helper is None or not entry:
        return None
    get, new = _capsule_functions()
    pointers = ctypes.c_void_p
    error = ctypes.create_string_buffer(1024)

    def array(capsules):
        return (pointers * len(capsules))(*[get(c, None) for c in capsules])

    def loop(head, ticks, count, carried, given):
        borrowed = handles([*head, *ticks, count, *given])
        lent = array(borrowed)
        a, b = len(head), len(head) + len(ticks)
        owned = array(handles(list(carried)))  # stolen by the first call
        failed = helper(pointers(entry), ctypes.c_int64(len(ticks)), ctypes.byref(lent, 0),
                        ctypes.c_int64(a), ctypes.byref(lent, a * ctypes.sizeof(pointers)),
                        pointers(lent[b]), owned, ctypes.c_int64(len(carried)),
                        ctypes.byref(lent, (b + 1) * ctypes.sizeof(pointers)),
                        ctypes.c_int64(len(given)), error, ctypes.c_int64(len(error)))
        tensors(borrowed)  # frees the lent handles
        if failed:
            raise RuntimeError(f"the lockstep loop failed: {error.value.decode()}")
        return tensors([new(p, None, None) for p in owned])

    return loop

"""Constants whose entries are all equal written into a graph, for Inductor.

Inductor passes every constant tensor of a graph to the generated code as an input, one handle
each per call, and cannot see its value. A captured graph holds many constants with all
entries equal (a prior's zero locations, expanded scales, the validation checks folded to
True); :func:`inline_uniform_constants` writes each as an ``aten.full`` node instead, which
the generated code computes in place.

Measured gain, end to end (``benchmarks/ablation.py``: whole PT runs, one thread, ranges over
interleaved rounds): without it the seed BNN's sampling phase (79 constants inlined) takes
1.07-1.21x as long (median 1.17), the 25-weight BNN's 1.01-1.34x (median 1.07); on eight
schools (18 inlined) no gain is seen within the noise (0.83-1.15).
"""

import torch


def inline_uniform_constants(gm):
    """Each constant of ``gm`` whose entries are all equal replaced by an ``aten.full`` of its
    shape, in place (on the 25-weight BNN's lockstep step, 30 of its 33 constants: a call took
    18 us instead of 23)."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target, None)
        if not torch.is_tensor(value) or value.numel() == 0 or value.is_complex():
            continue
        first = value.reshape(-1)[0]
        if not bitwise_equal(value, first.expand_as(value)):
            continue
        with graph.inserting_before(node):
            full = graph.call_function(
                torch.ops.aten.full.default, (list(value.shape), first.item()),
                {"dtype": value.dtype, "device": value.device, "pin_memory": False})
        node.replace_all_uses_with(full)
        graph.erase_node(node)
    used = {node.target for node in graph.nodes if node.op == "get_attr"}
    for name, _ in list(gm.named_buffers()):
        if name not in used and "." not in name:
            # AOTAutograd passes every buffer of the module, used or not, on every call
            delattr(gm, name)
    graph.lint()
    gm.recompile()


def bitwise_equal(a, b):
    """Whether tensors ``a`` and ``b`` (same shape and dtype) hold the same bits: NaN equals
    NaN, and 0.0 differs from -0.0, unlike ``torch.equal``."""
    if a.is_floating_point() or a.is_complex():
        # a fresh contiguous copy: an expanded tensor's stride 0 cannot be viewed as bytes
        a, b = (t.new_empty(t.shape).copy_(t).reshape(-1).view(torch.uint8) for t in (a, b))
    return torch.equal(a, b)

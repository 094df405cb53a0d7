r"""
A weight matrix whose subnetwork entries are variables, for Jacobians that cost O(S) per row.

A latent matrix :math:`W` with the subnetwork entries :math:`(r_s, c_s)` replaced by variables
:math:`\delta_s` is :math:`W = W_0 + \sum_s \delta_s e_{r_s} e_{c_s}^\top`, with :math:`W_0`
the MAP with those entries zeroed. Inside a product the sum distributes,

.. math::

    A W = A W_0 + \big[\, A_{:, r_s}\, \delta_s \,\big] \text{ added to column } c_s,

so reverse mode never forms the dense gradient of :math:`W` (``rows x D`` numbers per batch of
rows): the gradient w.r.t. :math:`\delta` is a gather, and the dense work is one GEMM with the
constant :math:`W_0`. :class:`SubnetMatrix` applies this to ``matmul``, ``@``, ``mm``,
``F.linear`` and transposes; every other operation sees the equivalent dense tensor, so the
values (and their derivatives) are always exactly those of :math:`W`.

Only public torch is used: an operation runs on the plain tensor through
``torch.Tensor.__torch_function__``, the base case torch documents for subclasses. It replaced
the private ``torch._C.DisableTorchFunctionSubclass`` at no measurable cost: the S = 2000 fit
of ``benchmarks/subnet_curvature.py`` (669,706 weights, one thread; machine A, load ~0.9) took
3.14 s against 3.25 s (medians of five fits each, the two alternating).
"""

import torch
import torch.nn.functional as F


def _plain_call(func, args=(), kwargs=None):
    """``func(*args, **kwargs)`` with every tensor subclass's ``__torch_function__`` off. Called
    on ``torch.Tensor`` itself with no types to check, torch's base case returns ``func``'s
    result as it is (a subclass would have it converted to the subclass)."""
    return torch.Tensor.__torch_function__(func, (), args, kwargs)


def unavailable():
    """None: a :class:`SubnetMatrix` can always be made (public torch only).
    :class:`~pyro_subnet.curvature.LatentModel` takes dense rows where this gives a reason."""
    return None


_MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm}
_RMATMUL = {torch.Tensor.__rmatmul__}
_TRANSPOSE = {torch.Tensor.t, torch.t, torch.Tensor.T.__get__, torch.Tensor.mT.__get__}
_META = {torch.Tensor.shape.__get__, torch.Tensor.size, torch.Tensor.dim, torch.Tensor.ndim.__get__,
         torch.Tensor.dtype.__get__, torch.Tensor.device.__get__, torch.Tensor.numel,
         torch.Tensor.is_floating_point, torch.Tensor.layout.__get__}


class SubnetMatrix(torch.Tensor):
    """
    A 2-D tensor equal to ``base`` with ``base[rows, cols] = delta``; see the module docstring.

    :param torch.Tensor base: the constant matrix (its ``rows, cols`` entries are ignored).
    :param torch.LongTensor rows: row of each variable entry.
    :param torch.LongTensor cols: column of each variable entry.
    :param torch.Tensor delta: the variables, shape ``(S,)``.
    """

    @staticmethod
    def __new__(cls, base, rows, cols, delta):
        zeroed = base.detach().index_put((rows, cols), torch.zeros((), dtype=base.dtype, device=base.device))
        t = zeroed.as_subclass(cls)
        t._zeroed, t._rows, t._cols, t._delta = zeroed, rows, cols, delta
        return t

    def __init__(self, base, rows, cols, delta):
        pass

    def dense(self):
        """The equivalent ordinary tensor (differentiable w.r.t. ``delta``)."""
        return self._zeroed.index_put((self._rows, self._cols), self._delta)

    def transposed(self):
        return SubnetMatrix(self._zeroed.T, self._cols, self._rows, self._delta)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _META:
            return _plain_call(func, args, kwargs)
        if func in _TRANSPOSE and isinstance(args[0], SubnetMatrix) and not kwargs:
            return args[0].transposed()
        if func is torch.Tensor.transpose and isinstance(args[0], SubnetMatrix):
            dims = list(args[1:3]) + [kwargs[k] for k in ("dim0", "dim1") if k in kwargs]
            if len(dims) == 2 and all(isinstance(d, int) and -2 <= d <= 1 for d in dims):
                return args[0].transposed() if {d % 2 for d in dims} == {0, 1} else args[0]
        if func in _MATMUL and len(args) == 2 and not kwargs:
            a, b = args
            if isinstance(b, SubnetMatrix) and not isinstance(a, SubnetMatrix) and a.dim() >= 1:
                return _right(a, b)
            if isinstance(a, SubnetMatrix) and not isinstance(b, SubnetMatrix) and b.dim() >= 1:
                return _left(a, b)
        if func in _RMATMUL and len(args) == 2 and isinstance(args[0], SubnetMatrix):
            if not isinstance(args[1], SubnetMatrix) and args[1].dim() >= 1:
                return _right(args[1], args[0])
        if func is F.linear and isinstance(args[1], SubnetMatrix) and not isinstance(args[0], SubnetMatrix):
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            out = _right(args[0], args[1].transposed())
            return out if bias is None else out + bias
        return _plain_call(func, _densify(args), _densify(kwargs))


def _densify(obj):
    if isinstance(obj, SubnetMatrix):
        return obj.dense()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_densify(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _densify(v) for k, v in obj.items()}
    return obj


def _plain(t):
    return _plain_call(torch.Tensor.as_subclass, (t, torch.Tensor)) if isinstance(t, SubnetMatrix) else t


def _right(a, w):
    """``a @ w`` for dense ``a`` (``[..., n, k]`` or ``[k]``) and ``w`` a SubnetMatrix ``[k, m]``."""
    zeroed = _plain(w._zeroed)
    out = torch.matmul(a, zeroed)
    contrib = a[..., w._rows] * w._delta  # [..., (n,) S]
    return out.index_add(-1, w._cols, contrib)


def _left(w, b):
    """``w @ b`` for ``w`` a SubnetMatrix ``[n, k]`` and dense ``b`` (``[..., k, m]`` or ``[k]``)."""
    zeroed = _plain(w._zeroed)
    out = torch.matmul(zeroed, b)
    if b.dim() == 1:
        return out.index_add(-1, w._rows, b[w._cols] * w._delta)
    contrib = b[..., w._cols, :] * w._delta[:, None]  # [..., S, m]
    return out.index_add(-2, w._rows, contrib)

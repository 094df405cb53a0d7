"""The flat layout of a state: its latent sites in a fixed order, as one vector.

A state is a dict of site -> unconstrained tensor for Pyro, and one ``[D]`` row for the captured
graphs, the batched explorers and the messages between processes.
"""

from collections.abc import Mapping

import torch


class FlatLayout:
    """
    The sites ``names`` of ``shapes``, in that order, flattened into one vector (each site
    ``.reshape(-1)``).

    :param list dtypes: optional site dtypes that :meth:`unflatten` restores (the flat vector
        has one dtype; a state sent between processes keeps each site's own).
    """

    def __init__(self, names, shapes, dtypes=None):
        self.names = list(names)
        self.shapes = [torch.Size(shape) for shape in shapes]
        self.sizes = [shape.numel() for shape in self.shapes]
        self.dim = sum(self.sizes)
        self.dtypes = list(dtypes) if dtypes is not None else None

    @classmethod
    def of(cls, z, names):
        """The layout of the state ``z`` (site -> tensor), sites in ``names`` order."""
        return cls(names, [z[n].shape for n in names], [z[n].dtype for n in names])

    def flatten(self, z):
        if isinstance(z, FlatState) and z.layout is self:
            return z.flat
        return torch.cat([z[name].reshape(-1) for name in self.names])

    def flatten_rows(self, z, count):
        """``[count, dim]``: the rows of ``z`` (site -> tensor of ``(count,) + shape``)."""
        return torch.cat([z[name].reshape(count, -1) for name in self.names], -1)

    def unflatten(self, flat):
        """Site values from ``flat`` of shape ``batch_shape + (dim,)`` (views of it)."""
        parts = torch.split_with_sizes(flat, self.sizes, dim=-1)
        batch = flat.shape[:-1]
        out = {n: p.reshape(batch + s) for n, p, s in zip(self.names, parts, self.shapes)}
        if self.dtypes is not None:
            out = {n: v if v.dtype == d else v.to(d)
                   for (n, v), d in zip(out.items(), self.dtypes)}
        return out

    def unflatten_rows(self, flat):
        """The rows of ``flat`` ``[R, dim]`` as :class:`FlatState` states."""
        return [FlatState(self, row) for row in flat.unbind(0)]


class FlatState(Mapping):
    """
    A state (site -> tensor, read-only) held as its row ``flat`` of ``layout``, as a batched
    explorer returns it: the sites (views of the row) are made on the first read, since between
    two swaps only the cold rung's state is read as sites; :meth:`FlatLayout.flatten` of the same
    layout gives the row back without a copy.
    """

    __slots__ = ("layout", "flat", "_sites")

    def __init__(self, layout, flat):
        self.layout, self.flat, self._sites = layout, flat, None

    def _values(self):
        if self._sites is None:
            self._sites = self.layout.unflatten(self.flat)
        return self._sites

    def __getitem__(self, name):
        return self._values()[name]

    def __iter__(self):
        return iter(self.layout.names)

    def __len__(self):
        return len(self.layout.names)

    def __repr__(self):
        return f"FlatState({dict(self)!r})"


def same_values(a, b):
    """Whether states ``a`` and ``b`` (site -> tensor) hold equal values (``torch.equal`` per
    site; one comparison of their rows where both are :class:`FlatState` of one layout)."""
    if isinstance(a, FlatState) and isinstance(b, FlatState) and a.layout is b.layout:
        return torch.equal(a.flat, b.flat)
    return set(a) == set(b) and all(torch.equal(a[name], b[name]) for name in a)

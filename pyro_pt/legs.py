"""The legs of a ladder: one line of rungs from the cold end, or two joined at the cold end
(the stabilized variational run; docs/design.md, "The stabilized run").

Rungs are indexed cold first. A plain ladder is one *leg*, rungs ``0 .. K-1`` and pairs
``(p, p + 1)``. Two legs are rungs ``0 .. m-1`` (posterior to q) and ``m .. K-1`` (posterior to
the prior), swapped on the line ``K-1 .. m | 0 .. m-1``: pair ``p`` is ``(p, p + 1)`` except
the *bridge*, pair ``m - 1``, which is ``(0, m)``.
"""


class Legs:
    """
    How the K rungs of a run lie on its line of swaps.

    :param list sizes: the rungs of each leg, cold first: ``[K]`` for a plain ladder,
        ``[m, K - m]`` (the reference's leg, then the prior's) for a stabilized one.
    """

    names = ("reference", "prior")

    COPIED_WHOLE = True  # immutable: a checkpoint copies it whole (pyro_pt.checkpoint_state)

    def __init__(self, sizes):
        sizes = [int(s) for s in sizes]
        if len(sizes) not in (1, 2) or min(sizes) < 1 or (len(sizes) == 2 and min(sizes) < 2):
            raise ValueError(f"a ladder has one leg, or two of at least 2 rungs: got {sizes}")
        self.sizes = sizes
        self.num_rungs = sum(sizes)
        self.spans = [(sum(sizes[:i]), sum(sizes[:i + 1])) for i in range(len(sizes))]
        self.bridge = sizes[0] - 1 if self.stabilized else None
        self.pairs = [(p, p + 1) for p in range(self.num_rungs - 1)]
        self.parity = [p % 2 for p in range(self.num_rungs - 1)]
        if self.stabilized:
            m = sizes[0]
            self.pairs[self.bridge] = (0, m)
            self.parity[self.bridge] = 1
            self.parity[m:] = [(p - m) % 2 for p in range(m, self.num_rungs - 1)]

    @classmethod
    def plain(cls, num_rungs):
        return cls([num_rungs])

    @classmethod
    def of(cls, per_leg, num_rungs):
        """The legs of a run from its diagnostics' ``legs`` (each leg's statistics; None or
        empty: one leg of ``num_rungs``)."""
        return cls([len(leg["temperatures"]) for leg in per_leg.values()] if per_leg
                   else [num_rungs])

    @property
    def stabilized(self):
        return len(self.sizes) == 2

    @property
    def colds(self):
        """The rungs at beta = 1: ``[0]``, or ``[0, m]``."""
        return [a for a, _ in self.spans]

    @property
    def hots(self):
        """The hottest rung of each leg."""
        return [b - 1 for _, b in self.spans]

    def leg_of(self, rung):
        """The index of the leg ``rung`` is on (0: the reference's or the only one); of pair
        ``rung`` too, the bridge counted in the first."""
        return 0 if rung < self.spans[0][1] else 1

    def leg_pairs(self, leg):
        """The pair indices within ``leg`` (not the bridge), cold to hot."""
        a, b = self.spans[leg]
        return list(range(a, b - 1))

    def pick(self, leg, betas, pair_values=None, columns=None):
        """``leg``'s betas (cold first), its pairs' values and its rungs' columns
        ``[..., K]`` (the last two when given)."""
        a, b = self.spans[leg]
        out = [list(betas[a:b])]
        if pair_values is not None:
            out.append([pair_values[p] for p in self.leg_pairs(leg)])
        if columns is not None:
            out.append(columns[a:b] if isinstance(columns, list) else columns[..., a:b])
        return tuple(out) if len(out) > 1 else out[0]

    def join(self, per_leg, bridge=0.0):
        """One value per pair from each leg's list (cold to hot), ``bridge`` at the bridge."""
        if not self.stabilized:
            return list(per_leg[0])
        return list(per_leg[0]) + [bridge] + list(per_leg[1])

    def describe(self):
        if not self.stabilized:
            return f"{self.num_rungs} rungs"
        return (f"stabilized: {self.sizes[0]} rungs from the posterior to q and "
                f"{self.sizes[1]} from the posterior to the prior, joined at the cold end")

    def __eq__(self, other):
        return isinstance(other, Legs) and other.sizes == self.sizes

    def __repr__(self):
        return f"Legs({self.sizes})"


def split_replicas(num_replicas):
    """The two legs' sizes of a stabilized ladder of ``num_replicas`` rungs: the reference's
    leg takes the odd one."""
    prior = num_replicas // 2
    return [num_replicas - prior, prior]

"""The one warning category of :mod:`pyro_subnet`.

Every warning the package issues is a :class:`SubnetWarning` (or a subclass, such as
:class:`~pyro_subnet.SubnetLOOWarning`), so that one filter reaches them all::

    import warnings
    from pyro_subnet import SubnetWarning

    warnings.simplefilter("error", SubnetWarning)   # every pyro_subnet warning raises
"""


class SubnetWarning(UserWarning):
    """A result of :mod:`pyro_subnet` that holds with a caveat (a jittered precision, a prior
    fitted at the edge of its grid, fewer coordinates than asked for, ...); each says what
    happened and what to do."""

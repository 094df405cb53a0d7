r"""
The one bridge from Pyro results to ArviZ, for both of its generations.

ArviZ < 1 holds results in an :class:`arviz.InferenceData`; ArviZ >= 1 (``arviz-base``) holds
them in an :class:`xarray.DataTree` and ships no Pyro converter. Both are a set of named groups
of :class:`xarray.Dataset` with ``(chain, draw, ...)`` variables, so the exports of
:mod:`pyro_pt` and :mod:`pyro_subnet` compute their groups here once, as datasets, and only the
last step (:func:`build`) depends on the ArviZ that is installed: the two generations get the
same numbers.

:func:`from_pyro` is the one call for any result (an MCMC run of any kernel, a subnetwork
Laplace posterior), in place of ArviZ's ``az.from_pyro``, which ArviZ >= 1 no longer has. Nothing
here calls ArviZ's: the pointwise log-likelihood comes from tracing the model at each draw
(:func:`pointwise_log_likelihood`), which works for any model that runs, with ``PyroModule``
networks and ``X @ w`` regressions included (ArviZ's vectorized trace does not).

Every export follows the same rules (:mod:`pyro_arviz.sites`, :mod:`pyro_arviz.masked`):
``log_likelihood`` holds the data sites only (``obs=`` sites and, for MCMC runs, ``pyro.factor``
sites: see docs/design.md, "``pyro.factor`` terms"), so that ``az.loo`` finds one array in a model with one observed site; the
``pyro.deterministic`` sites are in ``posterior``, at each draw; masked observations are left
out of ``log_likelihood``, ``observed_data`` and ``posterior_predictive``, with coordinates that
give the kept points' original positions.
"""

# public names; the modules below import this package's modules, never the package itself,
# so that none of them waits on this file
from .containers import GROUP_ORDER, arviz_generation, build, dataset, groups_of  # noqa: F401
from .convert import from_pyro, register  # noqa: F401
from .mcmc import check_has_run, mcmc_groups  # noqa: F401
from .pointwise import Traced, pointwise_log_likelihood  # noqa: F401

"""Export a ParallelTempering run to ArviZ (both generations), tempering record included."""

import math

import numpy as np

import pyro_arviz

from .kernel import ParallelTempering
from .ladder import inverse_temperatures
from .legs import Legs


def to_inference_data(mcmc, *, log_likelihood=True):
    r"""
    ArviZ export of a :class:`~pyro.infer.MCMC` run of :class:`~pyro_pt.ParallelTempering`: an
    ``arviz.InferenceData`` under ArviZ < 1, an ``xarray.DataTree`` with the same groups and
    numbers under ArviZ >= 1.

    The groups come from the cold chain's samples and the model itself (docs/design.md, "ArviZ
    export"): ``posterior`` (with the ``pyro.deterministic`` sites at each draw),
    ``log_likelihood`` (the data sites: ``obs=`` and ``pyro.factor``, the terms the tempering
    scales), ``posterior_predictive``, ``observed_data`` (these three without masked
    observations) and ``sample_stats``, which holds ``diverging`` and the tempering record:

    - ``tempered_log_likelihood`` (chain, draw, temperature): ll of the state at each rung;
    - ``swap_accepted`` (chain, draw, swap_pair): 1 accepted, 0 refused, NaN not attempted;
    - ``ladder_temperature`` and ``ladder_beta`` (chain, temperature): each chain's final
      ladder (with ``adapt_temperatures`` every chain adapts its own);
    - ``pair_barrier`` (chain, swap_pair): each pair's barrier :math:`\Lambda_i`
      (:func:`~pyro_pt.barrier.pair_barriers`), and ``rung_barrier`` (chain, temperature):
      :math:`\lambda(\beta_k)` from each rung's ll draws;
    - ``local_barrier`` (chain, swap_pair): the local communication barrier
      :math:`\lambda(\beta) \approx \Lambda_i / (\beta_i - \beta_{i+1})` at the pair's
      mid-point ``local_barrier_beta``;
    - ``mcse_<site>`` (chain, the site's dims): the Monte Carlo error of each chain's mean of
      the latent site over its lineages' tours (:mod:`pyro_pt.regeneration`; valid where
      the cold chain cannot cross between modes on its own), with the tours counted in the
      ``mcse_tours`` attribute; NaN for a chain without an exact hot end, absent
      where no chain has one;

    with the temperatures of the chain with the most rungs as coordinates (chains whose
    ladders grew to different sizes are padded with NaN; with ``beta``, and for the two legs of
    a stabilized ladder each rung's ``leg``: ``"reference"`` or ``"prior"``), and per-chain
    swap acceptance, round trips, tempered restarts (NaN where the hot end is a finite
    temperature, whose restarts are not counted), the observed and theoretical round-trip
    rates, global barrier, recommended replicas and stepping-stone ``log_Z`` (with
    ``log_Z_meaning``; of the reference's leg, with ``barrier_prior_leg`` and
    ``log_Z_prior_leg`` beside them) as attributes. It round-trips through netCDF.

    With ``num_ladders=C`` (:mod:`pyro_pt.ensemble`) each ladder is a chain of its own where
    MCMC's draws split into C equal blocks (``num_samples`` a multiple of C, and MCMC holds
    the whole run's: not resumed in its sampling phase): its draws, its tempering record and
    its own numbers above, so that ArviZ's R-hat compares the ladders; otherwise the draws stay
    one chain, with the ladders' pooled numbers.

    :func:`pyro_arviz.from_pyro` gives the same export, and exports runs of other kernels too.

    :param mcmc: a :class:`~pyro.infer.MCMC` that has run a ``ParallelTempering`` kernel.
    :param bool log_likelihood: compute ``log_likelihood`` and ``posterior_predictive`` (one model
        call per cold-chain draw, which a model with ``pyro.deterministic`` sites makes anyway);
        the tempering record needs neither.
    :returns: ``arviz.InferenceData`` or ``xarray.DataTree``.
    """
    if isinstance(mcmc, ParallelTempering):
        raise TypeError(
            "to_inference_data takes the MCMC object that ran the kernel, not the kernel: "
            "mcmc = MCMC(kernel, ...); mcmc.run(*data); to_inference_data(mcmc)"
        )
    pyro_arviz.check_has_run(mcmc, "to_inference_data")
    if not isinstance(mcmc.kernel, ParallelTempering):
        raise TypeError(
            f"to_inference_data expects an MCMC run with a ParallelTempering kernel, this one ran "
            f"{type(mcmc.kernel).__name__}; pyro_arviz.from_pyro(mcmc) exports runs of any kernel"
        )
    diagnostics = mcmc.diagnostics()
    groups = pyro_arviz.mcmc_groups(mcmc, log_likelihood=log_likelihood)
    ladders = _ladders(mcmc)
    if ladders is not None:  # num_ladders > 1: a chain per ladder
        groups = {name: _split_chains(group, len(ladders)) for name, group in groups.items()}
        diagnostics = {key: {f"chain {c}": d.get(key) for c, d in enumerate(ladders)}
                       for key in ladders[0]}
    chains = sorted(diagnostics["tempering_record"], key=lambda c: int(c.split()[-1]))

    def of(key):  # the chains' values of a diagnostic, in chain order
        return [diagnostics[key][c] for c in chains]

    records = of("tempering_record")
    # Each chain adapts (and may grow) its own ladder: the coordinates are those of the chain
    # with the most rungs (the first such), the variables per chain, NaN past a chain's rungs.
    sizes = [len(t) for t in of("temperatures")]
    widest = chains[sizes.index(max(sizes))]
    temperatures = np.asarray(diagnostics["temperatures"][widest], dtype=np.float64)
    rungs, pairs = len(temperatures), len(temperatures) - 1
    ladders = _padded(of("temperatures"), rungs)
    pair = np.arange(pairs)
    # a stabilized ladder's two legs (pyro_pt.legs): pair m - 1 is the bridge of the cold rungs
    legs = Legs.of(diagnostics.get("legs", {}).get(widest), len(temperatures))
    colder, hotter = (list(rungs) for rungs in zip(*legs.pairs)) if legs.pairs else ([], [])
    local = _padded([np.reshape(b, (-1, 2)) for b in of("local_barrier")], pairs, axis=0)
    # the record's rows of the draws MCMC holds (a resumed run's: those since the resume)
    held = groups["posterior"].sizes["draw"]
    record = {
        "tempered_log_likelihood": _padded([r["log_likelihood"].numpy()[-held:] for r in records],
                                           rungs),
        "swap_accepted": _padded([r["swap_accepted"].numpy()[-held:] for r in records], pairs),
    }
    per_chain = {
        "ladder_temperature": ladders,
        "ladder_beta": _betas(ladders),
        "local_barrier_beta": local[..., 0],
        "local_barrier": local[..., 1],
        "pair_barrier": _padded(of("pair_barrier"), pairs),
        "rung_barrier": _padded(of("rung_barrier"), rungs),
    }
    dims = {"tempered_log_likelihood": ["temperature"], "swap_accepted": ["swap_pair"],
            "ladder_temperature": ["temperature"], "ladder_beta": ["temperature"],
            "local_barrier_beta": ["swap_pair"], "local_barrier": ["swap_pair"],
            "pair_barrier": ["swap_pair"], "rung_barrier": ["temperature"]}
    coords = {
        "temperature": temperatures,
        "beta": ("temperature", _betas(temperatures)),
        "swap_pair": pair,
        "pair_cold_temperature": ("swap_pair", temperatures[colder]),
        "pair_hot_temperature": ("swap_pair", temperatures[hotter]),
    }
    if legs.stabilized:
        coords["leg"] = ("temperature",
                         [legs.names[legs.leg_of(k)] for k in range(legs.num_rungs)])
    _add_mcse(per_chain, dims, of("mcse"), groups["posterior"])
    stats = groups["sample_stats"]
    # the same chains, draws and coordinates on every side (a mismatch is a bug, not padding)
    stats = stats.merge(pyro_arviz.dataset(record, dims=dims, coords=coords), join="exact",
                        compat="no_conflicts")
    stats = stats.merge(pyro_arviz.dataset(per_chain, sample_dims=("chain",), dims=dims,
                                           coords=coords), join="exact", compat="no_conflicts")
    stats.attrs["swap_acceptance"] = _padded(of("swap_acceptance"), pairs).ravel()
    # tempered restarts (pyro_pt.lineages); NaN where the hot end is not drawn exactly
    stats.attrs["restarts"] = np.asarray([math.nan if r is None else r for r in of("restarts")],
                                         dtype=np.float64)
    # the tours the mcse_<site> errors rest on (NaN: none, a finite hot end)
    stats.attrs["mcse_tours"] = np.asarray(
        [math.nan if n is None else n for n in of("mcse_tours")], dtype=np.float64)
    for key, dtype in (("round_trips", np.int64), ("barrier", np.float64),
                       ("log_Z", np.float64), ("recommended_replicas", np.int64),
                       ("round_trip_rate", np.float64),
                       ("theoretical_round_trip_rate", np.float64)):
        stats.attrs[key] = np.asarray(of(key), dtype=dtype)
    if legs.stabilized:  # the top-level barrier and log Z are the reference leg's
        for key in ("barrier", "log_Z"):
            stats.attrs[f"{key}_prior_leg"] = np.asarray(
                [math.nan if leg is None else leg["prior"][key] for leg in of("legs")],
                dtype=np.float64)
    stats.attrs["log_Z_meaning"] = diagnostics["log_Z_meaning"][chains[0]]
    stats.attrs["tempering"] = "likelihood-only (pyro_pt.ParallelTempering)"
    groups["sample_stats"] = stats
    return pyro_arviz.build(groups)


def _ladders(mcmc):
    """Each ladder's diagnostics where MCMC's one chain is ``num_ladders > 1`` equal blocks of
    draws (:mod:`pyro_pt.ensemble`), else None (one ladder; a last block cut short; or a run
    resumed in its sampling phase, whose MCMC holds the blocks' ends only: their draws stay one
    chain)."""
    kernel = mcmc.kernel
    ensemble = getattr(kernel, "ensemble", None)
    if ensemble is None or mcmc.num_chains != 1 or ensemble.block is None:
        return None
    if kernel.run.draws_before:
        return None
    if ensemble.block * len(ensemble.runs) != ensemble.num_samples:
        return None
    return kernel.ladder_diagnostics()


def _split_chains(group, num):
    """``group`` (a Dataset of one chain) with its draws as ``num`` chains of equal blocks."""
    import xarray as xr

    if "chain" not in group.dims:
        return group
    data = {}
    for name, var in group.data_vars.items():
        if var.dims[:2] != ("chain", "draw"):
            raise ValueError(f"to_inference_data: {name} has dims {var.dims}, not (chain, draw, "
                             "...): cannot give each ladder its chain")
        values = var.values.reshape((num, var.shape[1] // num) + var.shape[2:])
        data[name] = (var.dims, values)
    coords = {k: v for k, v in group.coords.items() if k not in ("chain", "draw")}
    out = xr.Dataset(data, coords=coords, attrs=group.attrs)
    return out.assign_coords(chain=np.arange(num), draw=np.arange(out.sizes["draw"]))


def _add_mcse(per_chain, dims, errors, posterior):
    """``mcse_<site>`` (chain, the site's own dims, as in ``posterior``): each chain's
    regenerative Monte Carlo error of the site's mean (:mod:`pyro_pt.regeneration`), NaN for a
    chain without an exact hot end; nothing where no chain has one."""
    known = [e for e in errors if e is not None]
    if not known:
        return
    for site, like in known[0].items():
        like = like.numpy()
        name = f"mcse_{site}"
        per_chain[name] = np.stack([np.full(like.shape, np.nan) if e is None
                                    else e[site].numpy() for e in errors])
        # the posterior's dims for the site (a draw's axes after chain and draw)
        dims[name] = (list(posterior[site].dims[2:]) if site in posterior.data_vars
                      else [f"{name}_dim_{i}" for i in range(like.ndim)])


def _padded(rows, size, axis=-1):
    """One array of the chains' ``rows`` (arrays whose ``axis`` has each chain's rungs or
    pairs), NaN past each chain's own ``size``: chains of a growing ladder can end apart."""
    out = []
    for row in rows:
        row = np.asarray(row, dtype=np.float64)
        widths = [(0, 0)] * row.ndim
        widths[axis] = (0, size - row.shape[axis])
        out.append(np.pad(row, widths, constant_values=np.nan))
    return np.stack(out)


def _betas(temperatures):
    """The ladder's one beta of each temperature, for one ladder or one per chain."""
    temperatures = np.asarray(temperatures, dtype=np.float64)
    flat = inverse_temperatures(temperatures.reshape(-1).tolist())
    return np.asarray(flat, dtype=np.float64).reshape(temperatures.shape)


# pyro_arviz.from_pyro imports no plugin: it learns here what exports a ParallelTempering run
pyro_arviz.register(ParallelTempering, to_inference_data, kernel=True,
                    hint="pass the MCMC object that ran the kernel: mcmc = MCMC(kernel, ...); mcmc.run(...)")

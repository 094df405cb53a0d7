"""Export a ParallelTempering run to ArviZ, tempering record included."""

import numpy as np
import xarray as xr


def to_inference_data(mcmc, **kwargs):
    r"""
    ArviZ ``InferenceData`` of a :class:`~pyro.infer.MCMC` run of
    :class:`~pyro_pt.ParallelTempering`.

    The groups are those of :func:`arviz.from_pyro` (posterior, log_likelihood, sample_stats,
    observed_data: the cold chain) and, in ``sample_stats``, the tempering record:

    - ``tempered_log_likelihood`` (chain, draw, temperature): ll of the state at each rung;
    - ``swap_accepted`` (chain, draw, swap_pair): 1 accepted, 0 refused, NaN not attempted;
    - ``ladder_temperature`` and ``ladder_beta`` (chain, temperature): each chain's final
      ladder (with ``adapt_temperatures`` every chain adapts its own);
    - ``local_barrier`` (chain, swap_pair): the local communication barrier
      :math:`\lambda(\beta) \approx r_i / (\beta_i - \beta_{i+1})` at the pair's mid-point
      ``local_barrier_beta``;

    with chain 0's temperatures (and ``beta``) as coordinates, and per-chain swap acceptance,
    round trips, the observed and theoretical round-trip rates, global barrier, recommended
    replicas and stepping-stone ``log_Z`` (with ``log_Z_meaning``) as attributes. It
    round-trips through netCDF.

    :param mcmc: a :class:`~pyro.infer.MCMC` that has run a ``ParallelTempering`` kernel.
    :param kwargs: passed to :func:`arviz.from_pyro` (``coords``, ``dims``, ...).
    :returns: ``arviz.InferenceData``.
    """
    import arviz as az

    diagnostics = mcmc.diagnostics()
    if "tempering_record" not in diagnostics:
        raise TypeError(
            "to_inference_data expects an MCMC run with a ParallelTempering kernel; "
            "use arviz.from_pyro for other kernels"
        )
    idata = az.from_pyro(mcmc, **kwargs)
    chains = sorted(diagnostics["tempering_record"], key=lambda c: int(c.split()[-1]))
    records = [diagnostics["tempering_record"][c] for c in chains]
    temperatures = np.asarray(diagnostics["temperatures"][chains[0]], dtype=np.float64)
    betas = np.where(np.isinf(temperatures), 0.0, 1.0 / temperatures)
    log_lik = np.stack([r["log_likelihood"].numpy() for r in records])
    swaps = np.stack([r["swap_accepted"].numpy() for r in records])
    pair = np.arange(len(temperatures) - 1)
    coords = {
        "chain": idata.sample_stats.chain.values,
        "draw": idata.sample_stats.draw.values,
        "temperature": temperatures,
        "beta": ("temperature", betas),
        "swap_pair": pair,
        "pair_cold_temperature": ("swap_pair", temperatures[:-1]),
        "pair_hot_temperature": ("swap_pair", temperatures[1:]),
    }
    # Each chain adapts its own ladder: the coordinates are chain 0's, the variables per chain.
    ladders = np.asarray([diagnostics["temperatures"][c] for c in chains], dtype=np.float64)
    local = np.asarray([diagnostics["local_barrier"][c] for c in chains], dtype=np.float64)
    local = local.reshape(len(chains), len(pair), 2)
    record = xr.Dataset(
        {
            "tempered_log_likelihood": (("chain", "draw", "temperature"), log_lik),
            "swap_accepted": (("chain", "draw", "swap_pair"), swaps),
            "ladder_temperature": (("chain", "temperature"), ladders),
            "ladder_beta": (("chain", "temperature"),
                            np.where(np.isinf(ladders), 0.0, 1.0 / ladders)),
            "local_barrier_beta": (("chain", "swap_pair"), local[..., 0]),
            "local_barrier": (("chain", "swap_pair"), local[..., 1]),
        },
        coords=coords,
    )
    stats = xr.merge([idata.sample_stats, record], combine_attrs="override")
    stats.attrs["swap_acceptance"] = np.asarray(
        [diagnostics["swap_acceptance"][c] for c in chains], dtype=np.float64
    ).ravel()
    stats.attrs["round_trips"] = np.asarray(
        [diagnostics["round_trips"][c] for c in chains], dtype=np.int64
    )
    for key, dtype in (("barrier", np.float64), ("log_Z", np.float64),
                       ("recommended_replicas", np.int64), ("round_trip_rate", np.float64),
                       ("theoretical_round_trip_rate", np.float64)):
        stats.attrs[key] = np.asarray([diagnostics[key][c] for c in chains], dtype=dtype)
    stats.attrs["log_Z_meaning"] = diagnostics["log_Z_meaning"][chains[0]]
    stats.attrs["tempering"] = "likelihood-only (pyro_pt.ParallelTempering)"
    idata.sample_stats = stats
    return idata

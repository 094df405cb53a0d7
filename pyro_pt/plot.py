"""A picture of a tempering run: swap acceptance per pair and the local communication barrier."""

import math

import numpy as np

from .ladder import inverse_temperatures
from .barrier import cumulative_barrier
from .legs import Legs

# A common rule of thumb: a pair accepting under 10% of its swaps is a bottleneck,
# one accepting over 80% spends a replica that a sparser ladder would not need.
BOTTLENECK, WASTE = 0.1, 0.8
NOT_RUN = "plot_tempering needs a run: call MCMC(ParallelTempering(...), ...).run(...) first"


def _from_diagnostics(diag, history=()):
    """The kernel's diagnostics of one chain -> what the figure draws."""
    temperatures = np.asarray(diag["temperatures"], dtype=np.float64)
    if len(temperatures) < 2:
        raise ValueError("plot_tempering needs a ladder of at least two temperatures: "
                         f"this run had {list(temperatures)} and no swaps")
    legs = Legs.of(diag.get("legs"), len(temperatures))  # a stabilized ladder's two legs
    return {"betas": np.asarray(inverse_temperatures(temperatures.tolist())),
            "temperatures": temperatures, "legs": legs,
            "acceptance": np.asarray(diag["swap_acceptance"], dtype=np.float64),
            # (beta midpoint, lambda) per pair, as ladder_statistics estimated it.
            "local": np.asarray(diag["local_barrier"], dtype=np.float64).reshape(-1, 2),
            "barrier": float(diag["barrier"]),
            "recommended": int(diag["recommended_replicas"]),
            "restarts": _count(diag.get("restarts")),
            "restarts_recorded": "restarts" in diag,  # not in an export from before they were
            "round_trips": _count(diag.get("round_trips")),
            "history": list(history)}


def _count(value):
    """A count of the diagnostics or the export (NaN there: not counted) -> int or None."""
    if value is None:
        return None
    value = float(np.asarray(value, dtype=np.float64).ravel()[0])
    return None if math.isnan(value) else int(value)


def _restarts_text(data):
    trips = "" if data["round_trips"] is None else f", {data['round_trips']} round trips"
    if not data["restarts_recorded"]:
        return trips[2:]
    if data["restarts"] is None:
        return f"restarts not counted (a finite hot end){trips}"
    return f"{data['restarts']} tempered restarts{trips}"


def _from_kernel(kernel):
    if kernel.rung_blocks is None:
        raise ValueError(NOT_RUN)
    return _from_diagnostics(kernel.diagnostics(), kernel.adaptation_history)


def _from_mcmc(mcmc):
    if mcmc.num_chains == 1:
        return _from_kernel(mcmc.kernel)
    # Several chains share one kernel object, which keeps the last chain's state (or none, when
    # the chains ran in worker processes); MCMC keeps each chain's diagnostics.
    try:
        diag = mcmc.diagnostics()
    except AttributeError as error:  # Pyro's MCMC before run() has no samples to diagnose
        raise ValueError(NOT_RUN) from error
    keys = ("temperatures", "swap_acceptance", "local_barrier", "barrier",
            "recommended_replicas", "legs", "restarts", "round_trips")
    data = _from_diagnostics({key: diag[key]["chain 0"] for key in keys if key in diag},
                             diag.get("adaptation_history", {}).get("chain 0", ()))
    data["chain"] = f"chain 0 of {mcmc.num_chains}"
    return data


def _from_inference_data(idata):
    stats = idata["sample_stats"]
    num_pairs = stats.sizes["swap_pair"]
    legs = {}
    if "leg" in stats.coords:  # each rung's leg: the legs' temperatures, in rung order
        for leg, t in zip(stats["leg"].values.tolist(), stats["temperature"].values.tolist()):
            legs.setdefault(leg, {"temperatures": []})["temperatures"].append(t)
    data = _from_diagnostics({
        "legs": legs,
        "temperatures": stats["temperature"].values,
        # Flattened over chains, (chains * pairs,): chain 0's come first.
        "swap_acceptance": np.asarray(stats.attrs["swap_acceptance"])[:num_pairs],
        "local_barrier": np.stack([stats["local_barrier_beta"].values[0],
                                   stats["local_barrier"].values[0]], -1),
        "barrier": np.asarray(stats.attrs["barrier"]).ravel()[0],
        "recommended_replicas": np.asarray(stats.attrs["recommended_replicas"]).ravel()[0],
        "round_trips": stats.attrs.get("round_trips"),
        **({"restarts": stats.attrs["restarts"]} if "restarts" in stats.attrs else {}),
    })
    num_chains = stats.sizes.get("chain", 1)
    if num_chains > 1:
        data["chain"] = f"chain 0 of {num_chains}"
    # The InferenceData does not keep the warmup's ladders: said in the figure, not dropped.
    data["no_history"] = "the ladder adaptation is not in the InferenceData: plot the MCMC"
    return data


def _tempering_data(source):
    import arviz as az
    import xarray as xr
    from pyro.infer import MCMC

    import pyro_arviz

    from .kernel import ParallelTempering

    if isinstance(source, MCMC):
        if not isinstance(source.kernel, ParallelTempering):
            raise TypeError("plot_tempering expects an MCMC run with a ParallelTempering kernel, "
                            f"got one with {type(source.kernel).__name__}")
        return _from_mcmc(source)
    if isinstance(source, ParallelTempering):
        return _from_kernel(source)
    if isinstance(source, (az.InferenceData, xr.DataTree)) \
            and "sample_stats" in pyro_arviz.groups_of(source) \
            and "swap_acceptance" in source["sample_stats"].attrs:
        return _from_inference_data(source)
    raise TypeError(
        "plot_tempering expects a ParallelTempering kernel that has run, a pyro.infer.MCMC "
        "with one, or the InferenceData of pyro_pt.to_inference_data(mcmc); "
        f"got {type(source).__name__}"
    )


def _temperature_label(t):
    if math.isinf(t):
        return "∞"
    return f"{t:.2f}" if t < 10 else f"{t:.3g}"


def plot_tempering(source, axes=None, path=None):
    r"""
    Plot how well the replicas of a parallel tempering run communicate.

    Left: the swap acceptance of each adjacent pair, with the mean and the rule of thumb's
    band (under 0.1 a bottleneck: red bars so labelled; over 0.8 a wasted replica). Right: the
    local barrier :math:`\lambda(\beta) \approx \Lambda_i / (\beta_i - \beta_{i+1})` at each
    pair's mid-point, piecewise constant between the rungs (docs/design.md, "The barrier"),
    the rejection rates' cumulative sum :math:`\Lambda(\beta)` (from the hottest rung up) on a
    twin axis, and the global barrier :math:`\Lambda` with the replicas it calls for,
    :math:`\lceil 2\Lambda \rceil`, in the title. Where the kernel adapted its ladder in warmup
    (``adapt_temperatures=True``), a third panel under the barrier shows the rungs of every
    round. Of several chains, chain 0 is plotted and the title says so (each chain adapts its
    own ladder); an InferenceData does not record the adaptation, and the figure says so. After
    a run over ``torch.distributed`` ranks, one rank alone may call it.

    **References**

    [1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
    a scalable highly parallel MCMC scheme", JRSS B.

    :param source: a :class:`~pyro_pt.ParallelTempering` kernel after a run, a
        :class:`~pyro.infer.MCMC` that ran one, or :func:`~pyro_pt.to_inference_data` of it.
    :param axes: optional matplotlib axes to draw into: two (acceptance, barrier), or three
        to include the ladder adaptation. By default a new figure.
    :param str path: optional file to save the figure to (PNG).
    :returns: the ``matplotlib.figure.Figure``.

    Example::

        mcmc = MCMC(ParallelTempering(model, adapt_temperatures=True), 1000, 1000)
        mcmc.run(x, y)
        plot_tempering(mcmc, path="tempering.png")
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plot_tempering needs matplotlib: pip install pyro-pt[plot] "
                          "(or pip install matplotlib)") from None
    data = _tempering_data(source)
    betas, temps, acc = data["betas"], data["temperatures"], data["acceptance"]
    history = data["history"]
    if axes is None:
        if history:
            fig = plt.figure(figsize=(11, 6.5), layout="constrained")
            grid = fig.add_gridspec(2, 2, height_ratios=(1.6, 1))
            axes = [fig.add_subplot(grid[:, 0]), fig.add_subplot(grid[0, 1])]
            axes.append(fig.add_subplot(grid[1, 1], sharex=axes[1]))
        else:
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    if len(axes) not in (2, 3):
        raise ValueError(f"axes must be two or three matplotlib axes, got {len(axes)}")
    fig = axes[0].figure

    if "chain" in data:  # of several chains, the one shown (each adapts its own ladder)
        fig.suptitle(f"Tempering of {data['chain']}", fontsize=11)
    ax = axes[0]
    pairs = np.arange(len(acc))
    bottleneck = acc < BOTTLENECK  # False for NaN, a pair never attempted
    legs = data["legs"]
    # a stabilized ladder's pairs (pyro_pt.legs): the leg to q, the bridge, the prior's leg
    leg_colors = ["tab:blue" if legs.leg_of(p) == 0 else "tab:gray" for p in pairs]
    if legs.stabilized:
        leg_colors[legs.bridge] = "0.8"
    ax.bar(pairs, acc, color=np.where(bottleneck, "tab:red", leg_colors), alpha=0.8)
    for pair in pairs[bottleneck]:
        ax.annotate("bottleneck", (pair, acc[pair]), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7, color="tab:red", rotation=90,
                    gid="bottleneck")
    ax.axhline(BOTTLENECK, color="tab:red", ls="--", lw=1, label=f"< {BOTTLENECK}: bottleneck")
    ax.axhline(WASTE, color="tab:orange", ls="--", lw=1, label=f"> {WASTE}: wasted replica")
    if np.isfinite(acc).any():
        ax.axhline(np.nanmean(acc), color="k", lw=1, label=f"mean {np.nanmean(acc):.2f}")
    ax.set_xticks(pairs, ["bridge" if p == legs.bridge else
                          f"{_temperature_label(temps[i])}–{_temperature_label(temps[j])}"
                          for p, (i, j) in enumerate(legs.pairs)],
                  rotation=30 if len(acc) > 5 else 0, ha="right" if len(acc) > 5 else "center")
    ax.set_ylim(0, 1)
    ax.set_xlabel("adjacent pair (temperatures)")
    ax.set_ylabel("swap acceptance")
    ax.set_title(f"Swap acceptance per adjacent pair\n{_restarts_text(data)}", pad=18)
    # Above the axes, where no bar can hide under it (a bottleneck bar is the one that matters).
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)

    ax = axes[1]
    twin = ax.twinx()
    for leg, color in zip(range(len(legs.spans)), ("tab:green", "tab:gray")):
        _plot_leg(ax, twin, legs, leg, color, betas, 1.0 - acc, data["local"])
    # Zoom on the ladder (a ladder of small temperatures is a thin slice of [0, 1]); the
    # margin keeps rungs at beta = 0 and 1 off the spines.
    margin = 0.03 * (betas.max() - betas.min())
    ax.set_xlim(betas.min() - margin, betas.max() + margin)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(r"$\beta = 1/T$")
    ax.set_ylabel(r"local barrier $\lambda(\beta)$")
    if legs.stabilized:
        ax.set_title(rf"Barrier of the leg to q $\Lambda$ = {data['barrier']:.2f}: about "
                     f"{data['recommended']} replicas in two legs", pad=30)
    else:
        ax.set_title(rf"Global barrier $\Lambda$ = {data['barrier']:.2f}: about "
                     rf"{data['recommended']} replicas ($\lceil 2\Lambda \rceil$)", pad=18)
    twin.set_ylim(bottom=0)
    twin.set_ylabel(r"cumulative $\Lambda(\beta)$", color="tab:purple")
    handles = [h for a in (ax, twin) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles=handles, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=2, frameon=False)

    if len(axes) == 3 and history:
        ax = axes[2]
        ladders = [entry["temperatures"] for entry in history] + [list(temps)]
        labels = [f"round {i + 1} (to scan {entry['scans']}), Λ≈{entry['barrier']:.2f}"
                  for i, entry in enumerate(history)] + ["sampling"]
        for row, ladder in enumerate(ladders):
            ladder_betas = inverse_temperatures(ladder)
            spans = list(enumerate(legs.spans))
            if len(ladder_betas) != legs.num_rungs:  # before q's leg joined: the prior's one
                spans = [(1 if legs.stabilized else 0, (0, len(ladder_betas)))]
            for leg, (a, b) in spans:  # the prior's leg a little lower
                ax.plot(ladder_betas[a:b], [row + 0.25 * leg] * (b - a), "|-", ms=10, lw=0.5,
                        color=("tab:blue", "tab:gray")[leg])
        ax.set_yticks(range(len(ladders)), labels, fontsize=7)
        ax.set_ylim(len(ladders) - 0.5, -0.5)  # first round on top
        ax.set_xlabel(r"$\beta = 1/T$")
        ax.set_title("Ladder adaptation in warmup (rungs per round)", fontsize=10)
    elif len(axes) == 3:
        axes[2].set_axis_off()  # a fixed ladder: nothing to show
    if not history and "no_history" in data:
        fig.text(0.99, 0.005, f"({data['no_history']})", ha="right", va="bottom", fontsize=7,
                 color="0.4")
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _plot_leg(ax, twin, legs, leg, color, betas, rejections, local):
    """One leg's local barrier (stairs and pair midpoints) and its cumulative barrier."""
    a, b = legs.spans[leg]
    pairs = legs.leg_pairs(leg)
    leg_betas, leg_local = betas[a:b], local[pairs]
    name = f" ({legs.names[leg]}'s leg)" if legs.stabilized else ""
    if len(pairs):
        # stairs() wants increasing edges: the ladder runs from hot (small beta) to cold.
        ax.stairs(leg_local[::-1, 1], leg_betas[::-1], color=color, lw=1.5, baseline=None)
        ax.plot(leg_local[:, 0], leg_local[:, 1], "o", color=color,
                label=rf"$\lambda$ at pair midpoints{name}", gid="local_barrier")
    for beta in leg_betas:
        ax.axvline(beta, color="0.85", lw=0.8, zorder=0)
    # From the hottest rung up, so that Lambda(beta) grows with beta and ends at Lambda.
    known = np.nan_to_num(rejections[pairs], nan=0.0)[::-1]
    twin.plot(leg_betas[::-1], cumulative_barrier(known), "--", lw=1,
              color="tab:purple" if leg == 0 else "tab:gray",
              label=rf"cumulative $\Lambda(\beta)${name}")

"""Same seed, same draws: small runs of every explorer and swap scheme against a record.

The record (``golden/runs.json``) holds every draw, swap decision, diagnostic and report
number of these runs; any change of them fails here. Integers, booleans and text compare
exactly, floats within a tolerance: another CPU (Intel's MKL against AMD's, another vector
width) rounds sums and products differently, and a few transitions amplify that. Perturbing
the float64 data by 1e-15 moves the runs by at most 2e-11 (relative); a change of the
sampler (a swap sign, a tempered prior, a lost Jacobian term) moves them by O(1). The one
float32 run gets a float32 tolerance. Floats are stored as JSON numbers, which round-trip
exactly.

To re-record (only for a change that is meant to alter draws, said so in its commit)::

    PYTHONPATH=$PWD python -m tests.pt.test_golden --record
"""

import json
import math
import pathlib
import sys

import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.health import REVIEW_KEYS, UNRELIABLE

from .models import bimodal_model, constrained_model, linear_data, linear_model

RECORD = pathlib.Path(__file__).parent / "golden" / "runs.json"

# name -> (model, kernel kwargs, warmup, samples); small, so the whole file runs in seconds.
# One ladder each (the batched HMC's small models would run 8 by default: pyro_pt.ensemble).
CONFIGS = {
    "rwmh_deo_adapt": ("linear", dict(num_replicas=4, max_temperature=20.0, explorer="rwmh"),
                       24, 12),
    "rwmh_seo_fixed": ("constrained", dict(num_replicas=3, max_temperature=9.0,
                                           explorer="rwmh", swap_scheme="seo",
                                           adapt_temperatures=False), 8, 12),
    "rwmh_sequential_interval2": ("linear", dict(temperatures=[1.0, 2.0, 5.0],
                                                 explorer="rwmh", swap_scheme="sequential",
                                                 swap_interval=2), 16, 10),
    "hmc_deo_adapt": ("linear", dict(num_replicas=4, max_temperature=30.0, explorer="hmc",
                                     explorer_kwargs={"num_steps": 4}, num_ladders=1), 30, 10),
    "hmc_prior_rung_seo": ("linear", dict(num_replicas=4, max_temperature=math.inf,
                                          explorer="hmc", swap_scheme="seo",
                                          explorer_kwargs={"num_steps": 3}, num_ladders=1),
                           24, 10),
    "nuts_deo_fixed": ("linear", dict(num_replicas=3, max_temperature=10.0, explorer="nuts",
                                      explorer_kwargs={"max_tree_depth": 3},
                                      adapt_temperatures=False), 10, 8),
    "nuts_bimodal_adapt": ("bimodal", dict(num_replicas=3, max_temperature=50.0,
                                           explorer="nuts",
                                           explorer_kwargs={"max_tree_depth": 3}), 12, 8),
    "rwmh_prior_rung_adapt": ("linear", dict(num_replicas=3, max_temperature=math.inf,
                                             explorer="rwmh"), 24, 10),
}


def _model(name):
    if name == "linear":
        return linear_model, linear_data()
    if name == "constrained":
        return constrained_model, (torch.tensor([0.3, 1.2, 0.8, 2.0]),)
    return bimodal_model, ()


def _plain(value):
    """Tensors and tuples as nested lists of Python numbers (floats round-trip in JSON)."""
    if torch.is_tensor(value):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def run_config(name):
    model_name, kwargs, warmup, samples = CONFIGS[name]
    model, args = _model(model_name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the batched potential's path depends on the thread count
    try:
        pyro.set_rng_seed(0)
        kernel = ParallelTempering(model, **kwargs)
        mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
        mcmc.run(*args)
    finally:
        torch.set_num_threads(threads)
    diagnostics = kernel.diagnostics()
    # The end-of-run review (pyro_pt.health) is text about these numbers, recorded after the
    # record was made: set aside here, every number it reviews is still compared bitwise.
    for key in REVIEW_KEYS:
        diagnostics.pop(key)
    # Added after the record too, for several chains; it is the record's adaptation_history.
    assert diagnostics.pop("adaptation_history") == kernel.adaptation_history
    # Added after the record: the rungs' raised targets, which local_diagnostics hold.
    assert diagnostics.pop("raised_target_accept_probs") == [
        e.diagnostics().get("target accept prob") for e in kernel.run.rungs.explorers]
    diagnostics["log_Z_meaning"] = diagnostics["log_Z_meaning"].split(UNRELIABLE)[0]
    # Tempered restarts, counted after the record: the index process's own count.
    restarts = diagnostics.pop("restarts")
    assert restarts == kernel.run.recorder.index.restarts
    # Added after the record: the cold chain's means' sd and Monte Carlo errors (None without
    # an exact hot end), which the draws compared here give.
    sd, errors, tours = (diagnostics.pop(k) for k in ("posterior_sd", "mcse", "mcse_tours"))
    draws = mcmc.get_samples()
    assert all(torch.allclose(sd[k], v.double().std(0)) for k, v in draws.items())
    assert (errors is None) == (tours is None) == (restarts is None)
    # Wall-clock seconds, added after the record (and shown on the progress bar when long).
    explorer_info = dict(kernel.explorer_info)
    assert explorer_info.pop("setup_seconds") > 0.0
    assert explorer_info.pop("reference") == "prior"  # added after the records
    explorer_info.pop("joining", None)  # reference="auto"'s, added after the records
    assert diagnostics.pop("legs", None) is None  # one leg, added after the records
    # compile="auto" (added after the records): these short runs stay on TorchScript
    assert explorer_info.pop("compile").startswith("TorchScript")
    logging = kernel.logging()
    logging.pop("set-up", None)
    logging.pop("restarts", None)  # added after the record
    report = kernel.report.drop(columns=["seconds", "warnings", "restarts", "mcse_sd"]).to_dict(
        orient="list")
    return _plain({
        "samples": mcmc.get_samples(),
        "diagnostics": diagnostics,
        "report": report,
        "adaptation_history": kernel.adaptation_history,
        "temperatures": kernel.temperatures,
        "explorer_info": explorer_info,
        "logging": logging,
        "local_diagnostics": [e.diagnostics() for e in kernel.run.rungs.explorers],
    })


# (rtol, atol) of the float comparison: rounding on another CPU, amplified ~1e4 times by the
# runs' transitions (measured with perturbed data), stays 100 times inside these
FLOAT64 = (1e-8, 1e-10)
FLOAT32 = (1e-4, 1e-6)
TOLERANCE = {name: FLOAT32 if config[0] == "constrained" else FLOAT64
             for name, config in CONFIGS.items()}


def _same(a, b, where, tolerance=(0.0, 0.0)):
    """Equality of nested records (floats within ``tolerance`` = (rtol, atol), NaN equal to
    NaN, infinities exactly); raises naming the first difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            _same(a[key], b[key], f"{where}.{key}", tolerance)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]", tolerance)
    elif isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        assert math.isnan(b), f"{where}: NaN != {b!r}"
    elif isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
        rtol, atol = tolerance
        assert abs(a - b) <= atol + rtol * abs(b), f"{where}: {a!r} != {b!r}"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_as_the_record(name):
    recorded = json.loads(RECORD.read_text())[name]
    _same(run_config(name), recorded, name, TOLERANCE[name])


def test_the_tolerance_still_sees_a_planted_bug(monkeypatch):
    from .mutations import temper_the_prior_in_batched_hmc

    temper_the_prior_in_batched_hmc(monkeypatch)
    recorded = json.loads(RECORD.read_text())["hmc_deo_adapt"]
    with pytest.raises(AssertionError, match="hmc_deo_adapt"):
        _same(run_config("hmc_deo_adapt"), recorded, "hmc_deo_adapt", TOLERANCE["hmc_deo_adapt"])


def record():
    runs = {name: run_config(name) for name in sorted(CONFIGS)}
    RECORD.write_text(json.dumps(runs, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {RECORD} ({RECORD.stat().st_size} bytes)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.pt.test_golden --record")
    record()

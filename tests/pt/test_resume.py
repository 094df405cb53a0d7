"""``ParallelTempering.resume(path, model)`` alone: the kernel's settings come from the checkpoint,
only the safe ones may be overridden, and another model, data or file is refused by name."""

import json

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_median
from torch.distributions.transforms import AffineTransform

from pyro_pt import ParallelTempering
from pyro_pt.checkpoint import MAGIC, decode, encode, read_checkpoint
from pyro_pt.explorers import RandomWalkMetropolis

from .models import linear_data, linear_model
from .test_checkpoint import assert_continues, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WARMUP, SAMPLES = 20, 12
# Settings away from the defaults, so that a resume that lost one would not continue the run.
KERNELS = {
    "hmc": {"num_replicas": 4, "max_temperature": float("inf"), "explorer": "hmc",
            "swap_scheme": "seo", "num_ladders": 2},
    "nuts": {"temperatures": [1.0, 3.0, 10.0], "explorer": "nuts",
             "explorer_kwargs": {"max_tree_depth": 3, "full_mass": [("w",)]},
             "swap_interval": 2, "adapt_temperatures": False},
}


def continue_from(path, warmup, samples, **overrides):
    kernel = ParallelTempering.resume(path, linear_model, **overrides)
    return run(kernel, warmup, samples, seed=123)


@pytest.mark.parametrize("name, scan", [("hmc", 4), ("nuts", 26)])
def test_resume_from_the_path_alone_continues_the_run(name, scan, tmp_path):
    torch.set_num_threads(1)
    periodic, path = tmp_path / "run.pt", str(tmp_path / f"scan{scan}.pt")
    full = run(ParallelTempering(linear_model, checkpoint_every=8, checkpoint_path=periodic,
                                 **KERNELS[name]), WARMUP, SAMPLES, write={scan: path})
    assert full["swap_accepted"].eq(1).any()
    periodic.unlink()
    resumed = continue_from(path, max(WARMUP - scan, 0), SAMPLES - max(scan - WARMUP, 0))
    assert_continues(full, resumed)
    # The periodic checkpoints go on, as configured in the checkpointed run.
    assert read_checkpoint(periodic, payload=False)[0]["scans"] == 32


SMALL = {"num_replicas": 3, "max_temperature": 10.0, "explorer": "rwmh"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A small run of 4 warmup scans and 6 draws, and its checkpoints at scans 4 and 6."""
    folder = tmp_path_factory.mktemp("resume")
    paths = {scan: str(folder / f"scan{scan}.pt") for scan in (4, 6)}
    full = run(ParallelTempering(linear_model, **SMALL), warmup=4, samples=6, write=paths)
    return full, paths


def test_safe_overrides_change_how_the_run_continues_not_its_draws(written, tmp_path):
    full, paths = written
    other = tmp_path / "other.pt"
    resumed = continue_from(paths[4], 0, 6, checkpoint_every=3, checkpoint_path=other,
                            init_strategy=init_to_median, explorer="rwmh")  # "rwmh": as stored
    assert_continues(full, resumed)
    assert read_checkpoint(other, payload=False)[0]["scans"] == 9  # 6, then 9: every 3


@pytest.mark.parametrize("change, match", [
    ({"swap_interval": 2}, "other kernel settings: swap_interval=2 given, 1 in the checkpoint"),
    ({"explorer_kwargs": {"scale": 0.5}},
     r"explorer_kwargs=\{'scale': 0.5\} given, \{\} in the checkpoint"),
    ({"compile": "torchscript"}, "compile='torchscript' given, 'auto' in the checkpoint"),
])
def test_an_unsafe_override_is_refused_naming_it(written, change, match):
    with pytest.raises(ValueError, match=match + ".*only checkpoint_every, checkpoint_path"):
        ParallelTempering.resume(written[1][4], linear_model, **change)


def test_an_argument_the_kernel_does_not_take_is_refused(written):
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['num_chains'\]"):
        ParallelTempering.resume(written[1][4], linear_model, num_chains=2)


def test_stored_settings_round_trip_exactly():
    value = {"a": (1, 2.5), "b": [float("inf"), -0.0, None, True, 0.1 + 0.2], 3: {"c": "x"},
             "d": [(1,), [1]]}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value
    for key in value:  # the types too: tuples, int keys, -0.0, True (not 1)
        assert repr(back[key]) == repr(value[key]), key
    for a, b in [([1, 2], (1, 2)), (1, 1.0), (1, True)]:  # equal in Python, not as settings
        assert json.dumps(encode(a)) != json.dumps(encode(b))


def rwmh_factory(potential_fn, **kwargs):
    return RandomWalkMetropolis(potential_fn, **kwargs)


@pytest.mark.parametrize("kwargs, name, shown", [
    ({"explorer": rwmh_factory}, "explorer", "<rwmh_factory: not stored>"),
    ({"explorer": "rwmh", "explorer_kwargs": {"scale": torch.tensor(0.2)}}, "explorer_kwargs",
     "{'scale': <Tensor: not stored>}"),
    ({"explorer": "rwmh", "transforms": {"w": AffineTransform(0.0, 2.0)}}, "transforms",
     "{'w': <AffineTransform: not stored>}"),
])
def test_what_json_cannot_hold_must_be_passed_again(kwargs, name, shown, tmp_path):
    path = str(tmp_path / "run.pt")
    full = run(ParallelTempering(linear_model, num_replicas=2, **kwargs), warmup=2, samples=3,
               write={3: path})
    with pytest.raises(ValueError, match=rf"cannot store {name} \(the checkpointed run's was "
                                         rf"{shown}\).*resume\(path, model, {name}=\.\.\.\)"):
        ParallelTempering.resume(path, linear_model)
    assert_continues(full, continue_from(path, 0, 2, **{name: kwargs[name]}))


# ----- another model or data -----


def renamed_observation(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 0.6).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(w @ x.T, 1.0), obs=y)


def positive_model(x, y):
    w = pyro.sample("w", dist.LogNormal(torch.zeros(2, dtype=x.dtype), 0.6).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(w @ x.T, 1.0), obs=y)


def shifted(x, y):
    return x, y + 1.0


@pytest.mark.parametrize("model, data, match", [
    (linear_model, shifted(*linear_data()), r"observed site 'y' has other values than in the "
                                            r"checkpoint .*same shape \[6\]"),
    (linear_model, linear_data(num_points=7), r"observed site 'y' has shape \[7\] in this model "
                                              r"but \[6\]"),
    (renamed_observation, linear_data(), "observed site 'y' of the checkpoint is missing from "
                                         "this model; observed site 'obs' of this model is not"),
    (linear_model, (linear_data()[0], linear_data()[1].float()),
     "observed site 'y' is torch.float32 in this model but torch.float64 .*pass its data as "
     "torch.float64"),
    (positive_model, linear_data(),
     r"latent site 'w' goes to unconstrained space by _InverseTransform\(IndependentTransform\("
     r"ComposeTransform\(ExpTransform\(\), AffineTransform\(\)\), 1\)\) in this model but by "
     r"_InverseTransform\(IndependentTransform\(ComposeTransform\(\), 1\)\)"),
])
def test_another_likelihood_is_refused_before_any_rung_is_built(written, model, data, match,
                                                                 monkeypatch):
    import pyro_pt.setup

    built = []
    monkeypatch.setattr(pyro_pt.setup, "build_rungs", lambda *a, **k: built.append(a))
    kernel = ParallelTempering.resume(written[1][6], model)
    with pytest.raises(ValueError, match=match):
        MCMC(kernel, 4, 0, disable_progbar=True).run(*data)
    assert not built


def test_float64_data_into_a_float32_checkpoint_names_the_dtype_needed(tmp_path):
    path = str(tmp_path / "float32.pt")
    data = [t.float() for t in linear_data()]
    run(ParallelTempering(linear_model, num_replicas=2, explorer="hmc", num_ladders=1,
                          explorer_kwargs={"num_steps": 2}), 2, 2, data=data, write={3: path})
    kernel = ParallelTempering.resume(path, linear_model)
    with pytest.raises(ValueError, match="latent site 'w' is torch.float64 in this model but "
                                         "torch.float32 .*the checkpoint needs torch.float32"):
        MCMC(kernel, 1, 0, disable_progbar=True).run(*linear_data())


# ----- a header that parses but is not a checkpoint's -----


def with_header(source, target, edit):
    data = open(source, "rb").read()
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    header = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size])
    head = json.dumps(edit(header)).encode()
    target.write_bytes(MAGIC + len(head).to_bytes(8, "little") + head
                       + data[len(MAGIC) + 8 + size:])
    return target


def without(*keys):
    def edit(header):
        for key in keys:
            parent = header["kernel"] if key.startswith("kernel.") else header
            del parent[key.removeprefix("kernel.")]
        return header
    return edit


@pytest.mark.parametrize("edit, match", [
    (lambda header: {}, "is not a pyro_pt checkpoint, or its header is corrupt: the header has "
                        "no field 'format_version'"),
    (lambda header: [], "no field 'format_version'"),
    (without("kernel", "observed_sites"), "is corrupt: its header has no field 'observed_sites', "
                                          "'kernel'; resume from an earlier checkpoint"),
    (without("kernel.explorer"), "its header has no field 'kernel.explorer'"),
    (lambda header: dict(header, format_version=1), "has format version 1; this pyro_pt reads "
                                                    "version 7"),
    # the previous format: it held one ladder
    (lambda header: dict(header, format_version=6), "has format version 6; this pyro_pt reads "
                                                    "version 7"),
])
def test_a_header_that_is_not_a_checkpoints_is_refused_naming_the_field(written, edit, match,
                                                                        tmp_path):
    path = with_header(written[1][4], tmp_path / "edited.pt", edit)
    with pytest.raises(ValueError, match=match) as error:
        ParallelTempering.resume(path, linear_model)
    assert str(path) in str(error.value)


def test_a_default_run_resumed_before_it_grows_grows_as_the_uninterrupted_run(tmp_path):
    """The default ladder grows in warmup (pyro_pt.growth): a run resumed from a checkpoint
    written before its growth rounds grows the same way and gives the same draws, bitwise;
    resuming with the starting ladder's num_replicas, the default's, is accepted."""
    from .test_kernel_barrier import sufficient_model

    def kernel(**kwargs):
        return ParallelTempering(sufficient_model, explorer="rwmh", **kwargs)

    torch.set_num_threads(1)
    path = str(tmp_path / "grows.pt")
    pyro.set_rng_seed(0)
    whole = MCMC(kernel(), 40, 300, disable_progbar=True,
                 hook_fn=lambda k, *_: k.run.scans == 100 and k.checkpoint(path))
    whole.run(10**6)
    grown = whole.kernel.num_replicas
    assert grown > 8  # the barrier of 10^6 points calls for more than the 8 it starts with
    for overrides in ({}, {"num_replicas": 8}):
        resumed = ParallelTempering.resume(path, sufficient_model, **overrides)
        mcmc = MCMC(resumed, 40, 200, disable_progbar=True)
        mcmc.run(10**6)
        assert resumed.num_replicas == grown
        assert torch.equal(mcmc.get_samples()["theta"], whole.get_samples()["theta"])
        assert resumed.diagnostics()["restarts"] == whole.kernel.diagnostics()["restarts"]



def test_a_resumed_runs_export_holds_the_record_of_its_draws(written):
    """The resumed MCMC holds the draws since the checkpoint: its export's tempering record is
    the uninterrupted run's last rows, draw for draw (not the whole run's, NaN-padded)."""
    from pyro_pt import to_inference_data

    full, paths = written
    kernel = ParallelTempering.resume(paths[6], linear_model)
    pyro.set_rng_seed(3)
    mcmc = MCMC(kernel, num_samples=4, warmup_steps=0, disable_progbar=True)
    mcmc.run(*linear_data())
    record = to_inference_data(mcmc, log_likelihood=False)["sample_stats"]
    assert record["tempered_log_likelihood"].shape == (1, 4, 3)
    assert (record["tempered_log_likelihood"].values[0]
            == full["log_likelihood"][-4:].numpy()).all()

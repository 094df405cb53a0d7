"""pyro_pt.compat reads private names of Pyro's MCMC: pinned to the Pyro they were read from."""

import inspect

import pytest
import torch

import pyro
import pyro.infer.mcmc.api as api
from pyro.infer import HMC, NUTS
from pyro.ops.welford import WelfordCovariance

from pyro_pt import checkpoint_state, compat


def test_pinned_to_the_pyro_version_it_was_checked_with():
    # A new Pyro may rename its samplers or their num_chains: re-read pyro.infer.mcmc.api,
    # then update the pin.
    assert pyro.__version__ == compat.CHECKED_WITH_PYRO
    for name in compat.SAMPLERS:
        assert "num_chains" in inspect.signature(getattr(api, name).__init__).parameters, name
    assert isinstance(getattr(api, compat.WORKER), type)
    # A checkpoint reads the sampler's num_samples (compat.mcmc_num_samples).
    assert "num_samples" in inspect.signature(api._UnarySampler.__init__).parameters


def _called_from(name, num_chains):
    """inside_multichain_mcmc() called from a method of an object of class ``name``."""
    owner = type(name, (), {"num_chains": num_chains,
                            "run": lambda self: compat.inside_multichain_mcmc()})()
    return owner.run()


def test_sees_the_samplers_frames():
    assert _called_from("_UnarySampler", 2) is True
    assert _called_from("_MultiSampler", 3) is True
    assert _called_from("_Worker", 1) is True  # a worker of parallel chains
    assert _called_from("_UnarySampler", 1) is False
    assert _called_from("Other", 2) is False
    assert compat.inside_multichain_mcmc() is False


def test_sees_the_samplers_num_samples():
    owner = type("_UnarySampler", (), {"num_samples": 7,
                                       "run": lambda self: compat.mcmc_num_samples()})()
    assert owner.run() == 7
    assert compat.mcmc_num_samples() is None


@pytest.mark.parametrize("kernel_class, kwargs", [
    (HMC, {"num_steps": 3}), (NUTS, {"max_tree_depth": 2}), (NUTS, {"full_mass": True}),
])
def test_pyro_state_declares_every_attribute_of_the_kernels_a_rung_holds(kernel_class, kwargs):
    # compat.PYRO_STATE is what a checkpoint saves of Pyro's kernels: a new Pyro that gives
    # them another attribute must be read again (a checkpoint refuses the attribute till then).
    kernel = kernel_class(potential_fn=lambda z: 0.5 * (z["w"] ** 2).sum(), **kwargs)
    kernel.initial_params = {"w": torch.zeros(2)}
    kernel.setup(warmup_steps=10)
    z = {"w": torch.zeros(2)}
    for _ in range(12):  # through warmup, a mass-matrix window included, into sampling
        z = kernel.sample(z)
    adapter = kernel._adapter
    parts = [kernel, adapter, adapter._mass_matrix_adapter, adapter._step_size_adapt_scheme]
    for part in parts:
        name = f"{type(part).__module__}.{type(part).__qualname__}"
        assert name in compat.PYRO_STATE, name
        state, slots, rebuilt = checkpoint_state.check_declared(part)
        assert set(vars(part)) == set(state + slots + rebuilt), name
    welford = WelfordCovariance(diagonal=True)
    welford.update(torch.ones(3, 2))
    assert set(vars(welford)) == set().union(*checkpoint_state.check_declared(welford))

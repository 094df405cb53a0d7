"""pyro_pt against the tempering samplers a user would pick instead, side by side: each sampler's
worst labelling's share error and log Z error after a fixed wall time, on targets whose mode
shares and log evidence are exact.

Targets (``_tempering_targets.py`` says how each exact answer is computed):

- ``mix2``, ``mix3``: the battery's two- and three-component mixtures (``mix2`` and ``mix3``
  of ``explorers.py``, the models and data of ``_explorers_models.py``); labellings: the
  orderings of the means, exact shares 1/2 and 1/6; log Z by Gauss-Hermite quadrature (for
  ``mix2`` checked against a full grid, printed).
- ``gauss10``, ``gauss100``: three Gaussian modes of weights 0.5, 0.3, 0.2 (likelihood sd 1,
  ``|m_j| = 8`` along random orthonormal directions) under a Normal(0, 3^2) prior in 10 and 100
  dimensions; closed-form shares and log Z.
- ``signs20``: a product over 20 coordinates of two-component likelihoods at +-2 (sd 0.5,
  weights 0.2 to 0.8) under a Normal(0, 3^2) prior: 2^20 modes; labellings: each coordinate's
  sign, its exact probability and log Z in closed form.

Samplers, each as a new user runs it, one thread, started from the prior, for a wall budget
(``--budgets``, default 30 60 120 s) per seed (``--seeds``):

- ``pyro_pt``: ``ParallelTempering(model)`` under ``MCMC(warmup_steps=n, num_samples=n)``, its
  defaults otherwise. Pyro's MCMC takes a number of draws, not a time, so ``n`` is the budget over
  twice the target's seconds per scan, measured by an untimed pilot (``n`` = 100) and updated
  after each run; a run under 3/4 of its budget (its scans got cheaper, e.g. once
  ``compile="auto"`` switched to Inductor) is an untimed calibration, run again longer (at most
  three times), so a timed run usually finds Inductor's cache warm, as every run of a model
  after its first does; its seconds are printed. log Z: ``kernel.diagnostics()["log_Z"]`` (stepping
  stones); restarts/s: ``diagnostics()["restarts"]`` (prior draws that reached the cold chain in
  the sampling phase) over the run's seconds. ``--ladders 0 1 4`` runs it once per
  ``num_ladders`` (``pyro_pt``: ``ParallelTempering(model)``, whose default rule runs 8 ladders
  on these small models; ``pyro_pt x1``, ``pyro_pt x4``: ``num_ladders=1``, ``4``); each ladder
  runs ``n + n`` scans and MCMC holds ``n`` draws, every C-th of each ladder
  (:mod:`pyro_pt.ensemble`). ``--references auto prior mixture`` runs it once per reference
  (``pyro_pt``: the default ``reference="auto"``, :mod:`pyro_pt.reference.joining`;
  ``pyro_pt prior``: the prior alone; ``pyro_pt mixture``: ``reference="mixture"``,
  :mod:`pyro_pt.reference.mixture`), each from its own pilot.
- ``ptemcee`` 1.0 (Vousden et al. 2016): 32 walkers (at least ``2 dim + 2``, as it requires) x 8
  temperatures, ``Tmax=inf`` (its docstring's choice for an adaptive ladder), the ladder adapted
  in the first half of the budget (``adapt=True``, nothing stored), fixed in the second, whose
  cold walkers are the draws; log Z: ``log_evidence_estimate()`` (thermodynamic integration).
- ``eryn`` 1.2: the same walkers and temperatures (``tempering_kwargs=dict(ntemps=8,
  Tmax=inf)``), its default stretch move; adaptation stopped at half the budget (what
  ``stop_adaptation`` does at a known step); log Z: ``backend.get_evidence_estimate()`` (TI).
- ``reddemcee`` 1.0: ``PTSampler(walkers, dim, loglike, logprior, ntemps=8)`` with its own
  ladder (no beta = 0 rung) and adaptation, ``run_mcmc`` in sweeps of one step (``thin`` steps
  from 20 dimensions); the sweeps of the first half are discarded; log Z:
  ``get_evidence_ss(discard=...)`` (stepping stones).
- ``dynesty`` 3.1 (nested sampling): ``NestedSampler(loglike, prior_transform, dim)``, its
  defaults (500 live points, ``bound="multi"``, the sampler chosen by dimension: uniform below
  10, ``rwalk`` to 20, ``rslice`` above), run until its own stopping rule or the budget, the
  live points added; draws: ``samples_equal()``; log Z: ``logz[-1]``. It may stop early; its
  seconds are printed.

The ensemble samplers store every ``thin = max(1, dim // 10)``-th step, so a 100-d run stays
within memory. Their density is the target's numpy log-likelihood and log prior, called per
walker as their documentation shows (none is vectorized by default). A peer's seconds count
from its sampler's construction, pyro_pt's from ``MCMC.run`` (model capture and compilation
included).

The peers live in their own venv (``make bench-peers`` builds ``.venv-peers``; or
``--peers-python PATH``): this script, run by the project's interpreter, starts itself there as a
worker (``--worker``), single-threaded, and asks it for each run. Before timing, it checks that
the Pyro model and the numpy density agree at prior draws. Per run it prints a line; at the end a
markdown table: per sampler, target and budget, the range over seeds of the share error and the
log Z error (found - exact), the mean seconds, and for pyro_pt the restarts per second.

Command (the full table: 5 targets x 5 samplers x 3 budgets x 3 seeds, about 4 hours;
``--budgets 30 --seeds 1 2`` about 30 minutes; ``--quick``: 4 s budgets, one seed)::

    .venv/bin/python benchmarks/vs_tempering.py [--budgets 30 60 120] [--seeds 1 2 3]
        [--targets mix2 mix3 gauss10 signs20 gauss100] [--samplers pyro_pt ptemcee eryn
        reddemcee dynesty] [--peers-python .venv-peers/bin/python] [--quick]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tempering_targets import target  # noqa: E402

PEERS = ("ptemcee", "eryn", "reddemcee", "dynesty")
SAMPLERS = ("pyro_pt",) + PEERS
TARGETS = ("mix2", "mix3", "gauss10", "signs20", "gauss100")
TEMPERATURES, WALKERS = 8, 32
PILOT = 100  # pyro_pt's untimed pilot: warmup and draws
CHUNK = 20  # ensemble iterations between looks at the clock (a multiple of every thin)
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def thin(dim):
    return max(1, dim // 10)


def walkers(dim):
    """32, or ``2 dim + 2`` where ptemcee's rule (at least twice the dimension) needs more."""
    return max(WALKERS, 2 * dim + 2)


def specs():
    """The targets' specs (JSON-able), the battery's data drawn as ``_explorers_models`` does."""
    from _explorers_models import mixture_data

    def data(centres, per, seed):
        return mixture_data(centres, per, seed).double().numpy().tolist()

    gauss = dict(kind="gaussians", prior_scale=3.0, sigma=1.0, radius=8.0,
                 weights=[0.5, 0.3, 0.2], seed=0)
    return {
        "mix2": dict(name="mix2", kind="mixture", prior_scale=10.0, k=2,
                     y=data((-3.0, 3.0), 60, 1)),
        "mix3": dict(name="mix3", kind="mixture", prior_scale=5.0, k=3,
                     y=data((-4.0, 0.0, 4.0), 50, 2)),
        "gauss10": dict(gauss, name="gauss10", dim=10),
        "signs20": dict(name="signs20", kind="signs", prior_scale=3.0, dim=20, sigma=0.5,
                        offset=2.0, weights=[0.2, 0.8]),
        "gauss100": dict(gauss, name="gauss100", dim=100),
    }


# ----- the peers (run in the worker, under the peers' venv) -----

def run_ptemcee(t, seed, budget):
    np.float = float  # ptemcee 1.0.0 (2019) still calls np.float, gone since numpy 1.24
    import ptemcee

    begin = time.perf_counter()
    n, every = walkers(t.dim), thin(t.dim)
    sampler = ptemcee.Sampler(n, t.dim, t.loglike, t.log_prior, ntemps=TEMPERATURES,
                              Tmax=np.inf, random=np.random.RandomState(seed))
    p = t.prior_draws(np.random.default_rng(seed), TEMPERATURES * n).reshape(
        TEMPERATURES, n, t.dim)
    steps = 0
    while time.perf_counter() - begin < budget / 2:
        for p, _, _ in sampler.sample(p, iterations=CHUNK, storechain=False, adapt=True):
            pass
        steps += CHUNK
    stored = 0
    while not stored or time.perf_counter() - begin < budget:  # at least a chunk of draws
        for p, _, _ in sampler.sample(p, iterations=CHUNK, thin=every):
            pass
        steps, stored = steps + CHUNK, stored + CHUNK
    seconds = time.perf_counter() - begin
    log_z, _ = sampler.log_evidence_estimate()
    return sampler.chain[0].reshape(-1, t.dim), float(log_z), seconds, f"{steps} steps"


def run_eryn(t, seed, budget):
    from scipy import stats
    from eryn.ensemble import EnsembleSampler
    from eryn.prior import ProbDistContainer
    from eryn.state import State

    begin = time.perf_counter()
    np.random.seed(seed)
    n, every = walkers(t.dim), thin(t.dim)
    priors = {"model_0": ProbDistContainer({i: stats.norm(0.0, t.prior_scale)
                                            for i in range(t.dim)})}
    sampler = EnsembleSampler(n, t.dim, t.loglike, priors,
                              tempering_kwargs=dict(ntemps=TEMPERATURES, Tmax=np.inf))
    coords = t.prior_draws(np.random.default_rng(seed), TEMPERATURES * n).reshape(
        TEMPERATURES, n, 1, t.dim)
    state = State({"model_0": coords})
    steps = 0
    while time.perf_counter() - begin < budget / 2:
        for state in sampler.sample(state, iterations=CHUNK, store=False):
            pass
        steps += CHUNK
    control = sampler.temperature_control
    control.stop_adaptation = max(control.time, 1)  # as stop_adaptation=<burn-in steps> does
    stored = 0
    while not stored or time.perf_counter() - begin < budget:  # at least a chunk of draws
        for state in sampler.sample(state, iterations=CHUNK // every, thin_by=every):
            pass
        steps, stored = steps + CHUNK, stored + CHUNK
    seconds = time.perf_counter() - begin
    log_z, _ = sampler.backend.get_evidence_estimate()
    draws = sampler.get_chain()["model_0"][:, 0, :, 0, :]
    return draws.reshape(-1, t.dim), float(log_z), seconds, f"{steps} steps"


def run_reddemcee(t, seed, budget):
    import reddemcee

    begin = time.perf_counter()
    np.random.seed(seed)
    n, every = walkers(t.dim), thin(t.dim)
    sampler = reddemcee.PTSampler(n, t.dim, t.loglike, t.log_prior, ntemps=TEMPERATURES)
    sampler._random = np.random.RandomState(seed)  # it seeds nothing itself
    state = t.prior_draws(np.random.default_rng(seed), TEMPERATURES * n).reshape(
        TEMPERATURES, n, t.dim)
    steps, burn = 0, None
    while time.perf_counter() - begin < budget:
        if burn is None and time.perf_counter() - begin >= budget / 2:
            burn = steps // every  # stored sweeps to discard
        state = sampler.run_mcmc(state, nsweeps=CHUNK // every, nsteps=1, thin_by=every)
        steps += CHUNK
    seconds = time.perf_counter() - begin
    burn = steps // every // 2 if burn is None else burn
    log_z, _ = sampler.get_evidence_ss(discard=burn)
    draws = np.asarray(sampler.get_chain(discard=burn, flat=True))[0]
    return draws.reshape(-1, t.dim), float(log_z), seconds, f"{steps} steps"


def run_dynesty(t, seed, budget):
    import dynesty
    from dynesty.utils import compute_integrals
    from scipy import special

    begin = time.perf_counter()
    rng = np.random.default_rng(seed)
    sampler = dynesty.NestedSampler(t.loglike, lambda u: t.prior_scale * special.ndtri(u),
                                    t.dim, rstate=rng)
    dlogz = 1e-3 * (sampler.nlive - 1) + 0.01  # run_nested's default with the live points added
    stopped = "converged"
    for _ in sampler.sample(dlogz=dlogz):
        if time.perf_counter() - begin >= budget:
            stopped = "stopped at the budget"
            break
    for _ in sampler.add_live_points():
        pass
    seconds = time.perf_counter() - begin
    results = sampler.results
    _, logz, _, _ = compute_integrals(logl=results.logl, logvol=results.logvol)
    return (results.samples_equal(rstate=rng), float(logz[-1]), seconds,
            f"{results.niter} iterations, {stopped}")


RUNNERS = {"ptemcee": run_ptemcee, "eryn": run_eryn, "reddemcee": run_reddemcee,
           "dynesty": run_dynesty}


def worker():
    """The peers' side: one run per stdin line (JSON: sampler, spec, seed, budget, out); replies
    with its seconds, log Z and a note, the cold draws saved to ``out``."""
    import importlib.metadata as metadata

    print(json.dumps({p: metadata.version(p) for p in PEERS}), flush=True)
    targets = {}
    for line in sys.stdin:
        job = json.loads(line)
        spec = job["spec"]
        if spec["name"] not in targets:
            targets[spec["name"]] = target(spec)
        t = targets[spec["name"]]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                draws, log_z, seconds, note = RUNNERS[job["sampler"]](t, job["seed"],
                                                                      job["budget"])
            np.save(job["out"], draws)
            reply = {"seconds": seconds, "log_z": log_z, "note": note}
        except Exception as error:  # a peer that fails is a row of the table, not the end
            reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


# ----- pyro_pt (in the driver, under the project's venv) -----

def pyro_model(t, spec):
    """The Pyro model of a target, its arguments and its latent site."""
    import torch
    import pyro
    import pyro.distributions as dist

    if t.kind == "mixture":
        from _explorers_models import mix2, mix3

        return {2: mix2, 3: mix3}[t.k], (torch.tensor(spec["y"], dtype=torch.float32),), "mu"
    zero = torch.zeros(t.dim)
    if t.kind == "gaussians":
        means = torch.tensor(t.means, dtype=torch.float32)
        log_w = torch.tensor(np.log(t.weights), dtype=torch.float32)

        def model():
            x = pyro.sample("x", dist.Normal(zero, t.prior_scale).to_event(1))
            terms = dist.Normal(means, t.sigma).log_prob(x.unsqueeze(-2)).sum(-1) + log_w
            pyro.factor("likelihood", torch.logsumexp(terms, -1))
    else:
        w = torch.tensor(t.weights, dtype=torch.float32)

        def model():
            x = pyro.sample("x", dist.Normal(zero, t.prior_scale).to_event(1))
            up = dist.Normal(t.offset, t.sigma).log_prob(x) + w.log()
            down = dist.Normal(-t.offset, t.sigma).log_prob(x) + (1 - w).log()
            pyro.factor("likelihood", torch.logaddexp(up, down).sum(-1))
    return model, (), "x"


def check_model(t, model, model_args, site):
    """The Pyro model's log joint against the numpy one at three prior draws."""
    import torch
    from pyro import poutine

    for x in t.prior_draws(np.random.default_rng(0), 3) * 0.5:
        conditioned = poutine.condition(model, data={site: torch.tensor(x, dtype=torch.float32)})
        found = float(poutine.trace(conditioned).get_trace(*model_args).log_prob_sum())
        want = float(t.log_joint(x))
        if not math.isclose(found, want, rel_tol=1e-4, abs_tol=1e-3):
            raise AssertionError(f"{t.name}: the Pyro model gives {found}, numpy {want}")


def seeded_run(model, model_args, seed, warmup, samples, **kwargs):
    """One seeded ``ParallelTempering(model, **kwargs)`` run under ``MCMC(warmup, samples)``:
    ``(kernel, mcmc, seconds, the TemperingWarnings' texts)``."""
    import pyro
    from pyro.infer import MCMC

    from pyro_pt import ParallelTempering, TemperingWarning

    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    kernel = ParallelTempering(model, **kwargs)
    mcmc = MCMC(kernel, warmup_steps=warmup, num_samples=samples, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        begin = time.perf_counter()
        mcmc.run(*model_args)
        seconds = time.perf_counter() - begin
        kernel.diagnostics()  # its review's warnings too
    warned = [str(w.message) for w in caught if issubclass(w.category, TemperingWarning)]
    return kernel, mcmc, seconds, warned


def timed_pyro_pt(model, model_args, site, seed, warmup, samples, ladders=None,
                  reference="auto"):
    """One seeded ``ParallelTempering(model, num_ladders=ladders, reference=reference)`` run
    under ``MCMC(warmup, samples)``: ``(kernel, draws of site, seconds, diagnostics, the
    TemperingWarnings' texts)``."""
    kernel, mcmc, seconds, warned = seeded_run(model, model_args, seed, warmup, samples,
                                               num_ladders=ladders, reference=reference)
    draws = mcmc.get_samples()[site].double().numpy()
    return kernel, draws, seconds, kernel.diagnostics(), warned


def run_pyro_pt(model, model_args, site, seed, n, ladders=None, reference="auto"):
    kernel, draws, seconds, diagnostics, warned = timed_pyro_pt(model, model_args, site, seed,
                                                                n, n, ladders, reference)
    restarts = diagnostics.get("restarts") or 0
    return (draws, float(diagnostics["log_Z"]), seconds,
            f"{n} + {n} draws, K {kernel.num_replicas} x {kernel.explorer_info['num_ladders']} "
            f"ladders, {restarts} restarts"
            + (", warned" if warned else ""), restarts / seconds)


def fit_budget(model, model_args, site, seed, budget, per_scan, tries=3, ladders=None,
               reference="auto"):
    """A pyro_pt run of about ``budget`` seconds: ``n`` from ``per_scan`` (seconds per scan);
    a run that took under :data:`FILLED` of the budget (its per-scan cost fell, e.g. when
    ``compile="auto"`` switched to Inductor) is taken as a calibration and run again, longer,
    from its own per-scan cost, at most ``tries`` times. Returns run_pyro_pt's figures and the
    per-scan cost to start the next budget from."""
    for attempt in range(tries):
        n = max(50, int(budget / (2 * per_scan)))
        draws, log_z, seconds, note, rate = run_pyro_pt(model, model_args, site, seed, n,
                                                        ladders, reference)
        per_scan = seconds / (2 * n)
        if seconds >= FILLED * budget or attempt == tries - 1:
            return draws, log_z, seconds, note, rate, per_scan
        print(f"pyro_pt (calibration, untimed): {seconds:.1f} s of {budget:g}, {note}",
              flush=True)


# A pyro_pt run under this share of its budget is rerun longer (fit_budget).
FILLED = 0.75


# ----- the driver -----

def start_peers(python):
    env = dict(os.environ, **ONE_THREAD)
    process = subprocess.Popen([python, os.path.abspath(__file__), "--worker"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    return process, json.loads(process.stdout.readline())


def ask(process, job):
    process.stdin.write(json.dumps(job) + "\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def span(values, digits=3):
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else \
        f"{low:.{digits}f} to {high:.{digits}f}"


def table(results, args):
    print(f"\n## Summary: seeds {' '.join(map(str, args.seeds))}; ranges over the seeds; log Z "
          "error = found - exact\n")
    print("| target | sampler | budget (s) | seconds | worst share error | log Z error "
          "| restarts/s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.targets:
        for budget in args.budgets:
            for sampler in runs_of(args):
                runs = results.get((name, sampler, budget), [])
                if not runs:
                    continue
                failed = [r for r in runs if "error" in r]
                ok = [r for r in runs if "error" not in r]
                seconds = f"{np.mean([r['seconds'] for r in ok]):.0f}" if ok else "-"
                rate = span([r.get("rate") for r in ok], 2) if sampler.startswith("pyro_pt") \
                    else ""
                fail = f" ({len(failed)} failed)" if failed else ""
                print(f"| {name} | {sampler}{fail} | {budget:g} | {seconds} | "
                      f"{span([r['share_error'] for r in ok])} | "
                      f"{span([r['log_z_error'] for r in ok], 2)} | {rate} |")


def runs_of(args):
    """The samplers run, pyro_pt once per ``--references`` and ``--ladders`` value: ``pyro_pt``
    (the defaults), ``pyro_pt mixture`` (``reference="mixture"``), ``pyro_pt x8``
    (``num_ladders=8``), ..."""
    out = []
    for sampler in args.samplers:
        if sampler == "pyro_pt":
            out += [" ".join(["pyro_pt"] + ([] if r == "auto" else [r])
                             + ([] if c == 0 else [f"x{c}"]))
                    for r in args.references for c in args.ladders]
        else:
            out.append(sampler)
    return out


def ladders_of(sampler):
    """pyro_pt's ``num_ladders``: None (the default rule) for ``pyro_pt``, C for ``pyro_pt xC``."""
    return int(sampler.split("x")[-1]) if " x" in sampler else None


def reference_of(sampler):
    """pyro_pt's ``reference``: the word after ``pyro_pt`` that is not a ladder count."""
    words = [w for w in sampler.split()[1:] if not w.startswith("x")]
    return words[0] if words else "auto"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[30.0, 60.0, 120.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    parser.add_argument("--peers-python", default=os.environ.get(
        "PEERS_PYTHON", ".venv-peers/bin/python"),
        help="interpreter with ptemcee, eryn, reddemcee and dynesty (default $PEERS_PYTHON "
             "or .venv-peers/bin/python; `make bench-peers` builds it)")
    parser.add_argument("--ladders", type=int, nargs="+", default=[0],
                        help="pyro_pt's num_ladders, one pyro_pt sampler each (0: the default "
                             "rule, named 'pyro_pt'; C: named 'pyro_pt xC')")
    parser.add_argument("--references", nargs="+", default=["auto"],
                        choices=["auto", "prior", "variational", "mixture"],
                        help="pyro_pt's reference, one pyro_pt sampler each ('auto': the "
                             "default, named 'pyro_pt'; else 'pyro_pt <reference>')")
    parser.add_argument("--quick", action="store_true",
                        help="a check of the script: 4 s budgets, one seed")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker()
    if args.quick:
        args.budgets, args.seeds = [4.0], args.seeds[:1]

    import torch
    import pyro

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(f"budgets {args.budgets} s, seeds {args.seeds}; torch {torch.__version__}, pyro "
          f"{pyro.__version__}, one thread; load average "
          f"{tuple(round(v, 2) for v in os.getloadavg())}")
    peers = [s for s in args.samplers if s in PEERS]
    process = None
    if peers:
        try:
            process, versions = start_peers(args.peers_python)
            print("peers: " + ", ".join(f"{k} {v}" for k, v in versions.items())
                  + f" ({args.peers_python})")
        except (OSError, ValueError) as error:
            print(f"peers not available ({args.peers_python}: {error}); `make bench-peers`")
            args.samplers = [s for s in args.samplers if s not in PEERS]
    all_specs, results = specs(), {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.targets:
            spec = all_specs[name]
            t = target(spec)
            exact = t.log_z()
            check = f", full grid {t.grid_log_z():.6f}" if name == "mix2" else ""
            print(f"\n## {name}: {t.dim} dimensions, {len(t.shares)} labellings; exact log Z "
                  f"{exact:.6f}{check}")
            model, model_args, site = pyro_model(t, spec)
            check_model(t, model, model_args, site)
            per_scan = {}
            for sampler in runs_of(args):
                if sampler.startswith("pyro_pt"):  # each run's own pilot
                    *_, seconds, note, _ = run_pyro_pt(model, model_args, site, 0, PILOT,
                                                       ladders_of(sampler), reference_of(sampler))
                    per_scan[sampler] = seconds / (2 * PILOT)
                    print(f"{sampler} pilot (untimed): {seconds:.1f} s, {note}")
            print(f"{'sampler':16s} {'budget':>6s} {'seed':>4s} {'s':>6s} {'share err':>9s} "
                  f"{'logZ err':>9s}  note")
            for budget in args.budgets:
                for seed in args.seeds:
                    for sampler in runs_of(args):
                        if sampler.startswith("pyro_pt"):
                            draws, log_z, seconds, note, rate, per_scan[sampler] = fit_budget(
                                model, model_args, site, seed, budget, per_scan[sampler],
                                ladders=ladders_of(sampler), reference=reference_of(sampler))
                            row = {"seconds": seconds, "rate": rate}
                        else:
                            out = os.path.join(tmp, "draws.npy")
                            reply = ask(process, {"sampler": sampler, "spec": spec, "seed": seed,
                                                  "budget": budget, "out": out})
                            if "error" in reply:
                                print(f"{sampler:16s} {budget:6g} {seed:4d} failed: "
                                      f"{reply['error']}", flush=True)
                                results.setdefault((name, sampler, budget), []).append(reply)
                                continue
                            draws, log_z, seconds, note = (np.load(out), reply["log_z"],
                                                           reply["seconds"], reply["note"])
                            row = {"seconds": seconds}
                        row.update(share_error=t.share_error(draws), log_z_error=log_z - exact)
                        results.setdefault((name, sampler, budget), []).append(row)
                        print(f"{sampler:16s} {budget:6g} {seed:4d} {seconds:6.1f} "
                              f"{row['share_error']:9.3f} {row['log_z_error']:9.2f}  {note}",
                              flush=True)
        if process is not None:
            process.stdin.close()
            process.wait()
    table(results, args)
    print(f"\nload average at the end {tuple(round(v, 2) for v in os.getloadavg())}")


if __name__ == "__main__":
    main()

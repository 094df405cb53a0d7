"""Speed of the tempered potential and its gradient on the seed BNN (10 -> 64 -> 64 -> 1).

Section (a), 500 points, float32, one torch thread (``--threads``), medians over interleaved
rounds, each timing ``-(lp + beta * ll)`` and its gradient with respect to all 4929 latents:

- floor: the same log density written by hand in plain torch, gradient by autograd;
- traced: ``ModelSplit.log_densities`` (``poutine.condition`` + ``poutine.trace`` +
  ``compute_log_prob`` + log-det-Jacobians), gradient by autograd;
- fast: ``FunctionalSplit.log_densities`` as ``TemperedPotential`` calls it, gradient by autograd
  (the gradients come precomputed from the captured graph);
- fast, raw: the captured graph itself, ``FunctionalSplit.evaluate`` plus the combination;
- batched: ``batched_potential_and_grad`` with K = 1 and K = 8 replicas per call, vmapped
  (``batched="vmap"``) and looped (``batched="loop"``, what ``"auto"`` picks on one CPU thread).

``--options`` adds the other strategies that were measured to choose the fast path: the minimal
substituting messenger without a Trace (eager, autograd), ``torch.func.grad_and_value`` of it,
and ``torch.jit.trace`` of its forward pass with autograd through the traced graph;
``--compile`` adds ``torch.compile`` of the messenger path (about a minute to compile).

Section (b), a whole explorer iteration: ``ParallelTempering(explorer="hmc")`` (batched) with
K = 8 rungs in one process against one rung (``temperatures=[1.0]``), the same fixed number of
leapfrog steps, a fixed step size and no adaptation (``num_steps_jitter=0``), so every rung
does the same work per iteration. ``kernel.setup`` then ``kernel.sample`` called directly
(sampling phase, no warmup), medians over interleaved rounds; the time inside the batched
potential is measured by wrapping ``FunctionalSplit.batched_potential_and_grad`` (from outside).
``--nuts`` adds the same ratio with Pyro's NUTS explorer on every rung (fixed step size, fixed
tree depth), for context. A roofline for that ratio: the plain-torch floor of (a) written for K
replicas at once (latents ``(K, 4929)``, weights ``(K, n_in, n_out)`` through ``torch.baddbmm``,
x shared, one beta per replica), K = 8 against K = 1 per potential + gradient call, with the
achieved GFLOP/s of its matmuls (``--rounds``, ``--calls``, ``--threads``, ``--device``).

Section (c), effective draws per second of the cold chain's held-out predictions: a full
``MCMC`` run of ``ParallelTempering(explorer="hmc")`` with the default ladder adaptation and
step-size adaptation in warmup; the predictions f(x_test) at 10 held-out inputs are computed
in plain torch from the cold chain's weights; ESS by ``pyro.ops.stats.effective_sample_size``
(min and median over the inputs) divided by the wall time of the whole run (warmup
included), by the sampling phase's alone, and by the whole run's CPU time (steadier on a shared
machine). Defaults: K = 2 rungs up to T = 1.1, the explorer's defaults, 300 + 300 scans (the
highest single-run ESS among the settings measured, all of them transient,
``benchmarks/README.md``). A column that never moves is
flagged CONSTANT and counts as ESS 0. Whether the runs sample the posterior at all is checked
before the rate counts: one run's drift checks (split R-hat, block means, the weights' norm;
inconclusive below 100 effective draws), then ``--c-chains`` runs (4) from their own starting
points (``--c-init``: small weights or a prior draw) and the R-hat across them (< 1.05 to
pass). Plain Pyro NUTS on the same model gets a short run
(``--nuts-warmup``, ``--nuts-samples``, ``--nuts-depth``) measured in the same process; its ESS
from so few draws is rough; a reference figure for it (0.09 ESS/s at max_tree_depth 10,
quoted, not measured) is printed next to it.

Benchmarks print; they never assert.

Run::

    python benchmarks/pt_speed.py                  # all sections, about 2.5 minutes on 2 cores
    python benchmarks/pt_speed.py --section b      # one section: a, b, c or all
    python benchmarks/pt_speed.py --quick          # smoke test (seconds)
"""

import argparse
import os
import platform
import sys

import torch

import pyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pt_speed_ess import section_c  # noqa: E402
from _pt_speed_iteration import section_b  # noqa: E402
from _pt_speed_potential import section_a  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per round (default 40)")
    parser.add_argument("--options", action="store_true",
                        help="also time the strategies not chosen")
    parser.add_argument("--compile", action="store_true",
                        help="with --options, also torch.compile (slow to compile)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--section", choices=("a", "b", "c", "all"), default="all")
    parser.add_argument("--device", default="cpu",
                        help="device of the model, data and replicas, e.g. cuda (default "
                             "cpu); (c)'s predictions and statistics are computed on the CPU")
    parser.add_argument("--quick", action="store_true", help="a smoke test (seconds)")
    parser.add_argument("--seed", type=int, default=0)
    # (b)
    parser.add_argument("--num-steps", type=int, default=10,
                        help="(b) leapfrog steps per iteration (default 10)")
    parser.add_argument("--step-size", type=float, default=1e-3,
                        help="(b) fixed step size (default 1e-3)")
    parser.add_argument("--b-rounds", type=int, default=7, help="(b) rounds (default 7)")
    parser.add_argument("--b-iters", type=int, default=20,
                        help="(b) timed iterations per round and side (default 20)")
    parser.add_argument("--no-nuts-ratio", dest="nuts_ratio", action="store_false",
                        help="(b) skip the ratio with explorer='nuts'")
    parser.add_argument("--b-nuts-depth", type=int, default=3,
                        help="(b) max_tree_depth of the NUTS explorer (default 3)")
    # (c)
    # K = 2 up to T = 1.1 gave the highest ESS of single runs among the settings measured for
    # (c) (benchmarks/README.md); those runs are all transient by the checks (c) now makes, so
    # the default is kept for continuity with the recorded figures, not as a recommendation.
    parser.add_argument("--replicas", type=int, default=2, help="(c) K (default 2)")
    parser.add_argument("--max-temperature", type=float, default=1.1,
                        help="(c) hottest rung of the starting ladder (default 1.1)")
    parser.add_argument("--c-num-steps", type=int, default=10,
                        help="(c) leapfrog steps per iteration (default 10)")
    parser.add_argument("--c-jitter", type=float, default=None,
                        help="(c) num_steps_jitter (default: the explorer's, 0.5)")
    parser.add_argument("--c-target-accept", type=float, default=None,
                        help="(c) target_accept_prob (default: the explorer's, 0.8)")
    parser.add_argument("--c-warmup", type=int, default=300, help="(c) warmup scans")
    parser.add_argument("--c-init", choices=("prior", "small"), default="small",
                        help="(c) start from weights uniform in (-0.1, 0.1) (default) or from a "
                             "prior draw (init_to_sample)")
    parser.add_argument("--c-samples", type=int, default=300, help="(c) sampling scans")
    parser.add_argument("--c-chains", type=int, default=4,
                        help="(c) independent runs (seeds seed, seed+1, ...) for R-hat across "
                             "chains (default 4; 1 for one run)")
    parser.add_argument("--num-test", type=int, default=10, help="(c) held-out inputs")
    parser.add_argument("--nuts-warmup", type=int, default=30, help="(c) plain NUTS warmup")
    parser.add_argument("--nuts-samples", type=int, default=30,
                        help="(c) plain NUTS draws (0: skip)")
    parser.add_argument("--nuts-depth", type=int, default=6,
                        help="(c) plain NUTS max_tree_depth (default 6)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls = 2, 3
        args.b_rounds, args.b_iters, args.b_nuts_depth = 2, 2, 2
        args.c_warmup, args.c_samples, args.c_chains = 10, 10, 2
        args.nuts_warmup, args.nuts_samples, args.nuts_depth = 3, 3, 2
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, pyro {pyro.__version__}, "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    if args.section in ("a", "all"):
        section_a(args)
    if args.section in ("b", "all"):
        section_b(args)
    if args.section in ("c", "all"):
        section_c(args)


if __name__ == "__main__":
    main()

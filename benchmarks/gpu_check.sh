#!/usr/bin/env bash
# The checks that need a GPU, as one short script for a device machine (about 8 minutes):
# the CUDA tests, then the seed BNN's potential, K = 8 vs K = 1 iteration and one ESS run on
# the GPU (sections (a)-(c) of benchmarks/pt_speed.py), then the seed BNN's prior against
# variational reference (benchmarks/reference.py). Results go to ${OUT:-.}/gpu_check.txt.
#
#     bash benchmarks/gpu_check.sh            # from the repository root, .venv built by make
#
# Without .venv it runs python3 with the repository on PYTHONPATH; wheels in .whl/ (pyro-ppl,
# pyro-api, arviz and what arviz needs, downloaded beforehand with pip download) are
# installed into /tmp/site first, for a machine that has torch but cannot reach PyPI.
#
# One GPU cannot hold two nccl ranks, so benchmarks/pt_scaling.py --backend nccl needs a
# machine with two or more GPUs and is not run here.
set -u
out="${OUT:-.}/gpu_check.txt"
py=".venv/bin/python"
if [ ! -x "$py" ]; then
  py=python3
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      .whl/*.whl
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
  fi
  export PYTHONPATH="$PWD:${PYTHONPATH:-}"
fi
export PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c "import torch, pyro; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'pyro', pyro.__version__)"
  echo "== CUDA tests"
  timeout 120 "$py" -m pytest -q -p no:cacheprovider tests/pt/test_cuda.py \
    "tests/pt/test_batched_hmc_slots.py::test_cuda_matches_itself_across_batching" 2>&1 | tail -n 15
  echo "== pt_speed (a), (b) on cuda"
  timeout 90 "$py" benchmarks/pt_speed.py --device cuda --section a --rounds 5 --calls 40 2>&1 | tail -n 25
  timeout 80 "$py" benchmarks/pt_speed.py --device cuda --section b --no-nuts-ratio 2>&1 | tail -n 16
  echo "== pt_speed (c) on cuda, K = 8 up to T = 1.5, one chain"
  timeout 90 "$py" benchmarks/pt_speed.py --device cuda --section c --replicas 8 \
    --max-temperature 1.5 --c-chains 1 --nuts-samples 0 2>&1 | tail -n 12
  echo "== reference.py: the seed BNN, prior vs variational reference, K = 8, on cuda"
  timeout 170 "$py" benchmarks/reference.py --models seed_bnn --device cuda --seeds 1 \
    --warmup 300 --samples 500 2>&1 | tail -n 6
} 2>&1 | tee "$out"

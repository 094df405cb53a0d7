#!/usr/bin/env bash
# The checks that need a GPU, as one short script for a device machine (about 6 minutes):
# the CUDA tests, then the seed BNN's potential, K = 8 vs K = 1 iteration and one ESS run on
# the GPU (sections (a)-(c) of benchmarks/pt_speed.py). Results go to
# ${OUT:-.}/gpu_check.txt.
#
#     bash benchmarks/gpu_check.sh            # from the repository root, .venv built by make
#
# One GPU cannot hold two nccl ranks, so benchmarks/pt_scaling.py --backend nccl needs a
# machine with two or more GPUs and is not run here.
set -u
out="${OUT:-.}/gpu_check.txt"
py=".venv/bin/python"
[ -x "$py" ] || py=python3
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c "import torch, pyro; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'pyro', pyro.__version__)"
  echo "== CUDA tests"
  timeout 240 "$py" -m pytest -q -p no:cacheprovider tests/pt/test_cuda.py \
    "tests/pt/test_batched_hmc.py::test_cuda_matches_itself_across_batching" 2>&1 | tail -n 15
  echo "== pt_speed (a), (b) on cuda"
  timeout 240 "$py" benchmarks/pt_speed.py --device cuda --section a --rounds 5 --calls 40 2>&1 | tail -n 25
  timeout 240 "$py" benchmarks/pt_speed.py --device cuda --section b --no-nuts-ratio 2>&1 | tail -n 16
  echo "== pt_speed (c) on cuda, K = 8 up to T = 1.5, one chain"
  timeout 150 "$py" benchmarks/pt_speed.py --device cuda --section c --replicas 8 \
    --max-temperature 1.5 --c-chains 1 --nuts-samples 0 2>&1 | tail -n 12
} 2>&1 | tee "$out"

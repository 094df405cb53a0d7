# `make test` and `make demo` build .venv from nothing on a machine with Python 3.11 and reuse it.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# `make test-arviz1 [NEW=3.13]` runs the ArviZ >= 1 (DataTree) suite on a newer Python in its own
# venv: ArviZ 1 needs Python >= 3.12, whose PyPI torch is a CUDA build (about 5.7 GB; it runs on
# the CPU; --no-cache-dir keeps pip from holding a second copy of its wheels). The interpreter
# is python$(NEW) on PATH, else pyenv's newest $(NEW).x.
NEW ?= 3.12
PYTHON_NEW ?= $(shell python$(NEW) -c 'import sys; print(sys.executable)' 2>/dev/null || \
  PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep '^$(NEW)\.' | tail -n 1) pyenv which python$(NEW) 2>/dev/null)
VENV_NEW ?= .venv-py$(NEW)
PY_NEW := $(VENV_NEW)/bin/python
STAMP_NEW := $(VENV_NEW)/.installed
# the ArviZ-1 suite: the export tests of both generations and a fast subset of the rest
ARVIZ1_TESTS := tests/arviz tests/subnet/test_arviz.py tests/subnet/test_compare.py tests/subnet/test_loo.py tests/subnet/test_loo_shift.py tests/subnet/test_loo_shift_inputs.py tests/subnet/test_kfold.py tests/subnet/test_diagonal.py tests/subnet/test_predict.py \
  tests/pt/test_swap.py tests/pt/test_ladder.py tests/pt/test_recorders.py tests/pt/test_barrier.py tests/pt/test_purity.py

# `make test-wheel` tests what `pip install .` gives a user: the wheel, built by pip in an isolated
# build env from a copy of the tree without build outputs (a stale build/lib would fill in what
# the configuration leaves out), installed (not editable) into a fresh .venv-wheel with torch as
# in .venv, then README.md's two quickstarts run from a temporary folder outside the tree.
VENV_WHEEL := .venv-wheel
PY_WHEEL := $(VENV_WHEEL)/bin/python
WHEEL_DIR := build/wheel

# `make bench-peers` builds .venv-peers: the tempering samplers benchmarks/vs_tempering.py runs
# beside pyro_pt (a benchmark-only install, no torch, never a dependency of the packages). The
# versions are the ones the table in benchmarks/README.md was measured with; numpy stays below
# 2.4, which removed the np.in1d and np.trapz that eryn 1.2.6 and ptemcee 1.0.0 call.
VENV_PEERS := .venv-peers
PEERS := numpy==2.3.5 scipy==1.17.1 ptemcee==1.0.0 eryn==1.2.6 reddemcee==1.0 dynesty==3.1.0
STAMP_PEERS := $(VENV_PEERS)/.installed

.PHONY: test test-all test-wheel test-arviz1 demo venv clean bench-peers

venv: $(STAMP)

# Torch is pinned to the local CPU build unless one is already importable: a GPU user installs
# the CUDA build into their Python first, and the venv then sees it through system site-packages.
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	@test -x $(PY) || { if $(PYTHON) -c "import torch" 2>/dev/null; \
	  then $(PYTHON) -m venv --system-site-packages $(VENV); else $(PYTHON) -m venv $(VENV); fi; }
	$(PY) -m pip install --upgrade --quiet pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# Two tiers. `make test`, the command every change waits on: every module's exactness on small
# cases, contracts, errors, resume and export, skipping the tests marked `slow` (long statistical
# and multi-process runs); two pytest-xdist workers, a test file each at a time (its module
# fixtures computed once). Measured from a clean clone on an otherwise idle 2-core AMD EPYC:
# 762 tests in 4.8 minutes (one run; 754 took 4.0), about a minute more building .venv.
# `make test-all` runs every test, the second tier too; CI runs it. TEST_WORKERS=0 runs a tier
# in one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(PYTEST) -m "not slow" tests

test-all: $(STAMP)
	$(PYTEST) tests

test-wheel:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	rm -rf $(VENV_WHEEL) $(WHEEL_DIR)
	mkdir -p $(WHEEL_DIR)/src
	tar -c --exclude=./.git --exclude='./.venv*' --exclude=./build --exclude='*.egg-info' \
	  --exclude=__pycache__ . | tar -x -C $(WHEEL_DIR)/src
	@if $(PYTHON) -c "import torch" 2>/dev/null; \
	  then $(PYTHON) -m venv --system-site-packages $(VENV_WHEEL); else $(PYTHON) -m venv $(VENV_WHEEL); fi
	$(PY_WHEEL) -m pip install --upgrade --quiet pip
	@$(PY_WHEEL) -c "import torch" 2>/dev/null || $(PY_WHEEL) -m pip install --quiet torch==2.13.0
	$(PY_WHEEL) -m pip wheel --quiet --no-deps -w $(WHEEL_DIR)/dist $(WHEEL_DIR)/src
	$(PY_WHEEL) -m pip install --quiet $(WHEEL_DIR)/dist/*.whl
	$(PY_WHEEL) .ci/quickstarts.py README.md

$(STAMP_NEW): pyproject.toml
	@test -n "$(PYTHON_NEW)" || { echo "need python$(NEW) (make test-arviz1 NEW=3.12 or PYTHON_NEW=/path/to/python)"; exit 1; }
	@test -x $(PY_NEW) || $(PYTHON_NEW) -m venv $(VENV_NEW)
	$(PY_NEW) -m pip install --upgrade --quiet pip
	$(PY_NEW) -m pip install --quiet --no-cache-dir -e '.[test]' 'arviz>=1'
	@touch $(STAMP_NEW)

test-arviz1: $(STAMP_NEW)
	$(PY_NEW) -c "import arviz, sys; print('ArviZ', arviz.__version__, 'on Python', sys.version.split()[0])"
	$(PY_NEW) -m pytest -q $(ARVIZ1_TESTS)

bench-peers: $(STAMP_PEERS)

$(STAMP_PEERS): Makefile
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	@test -x $(VENV_PEERS)/bin/python || $(PYTHON) -m venv $(VENV_PEERS)
	$(VENV_PEERS)/bin/python -m pip install --upgrade --quiet pip
	$(VENV_PEERS)/bin/python -m pip install --quiet $(PEERS)
	@touch $(STAMP_PEERS)

demo: $(STAMP)
	$(PY) examples/pt_bimodal.py --plot pt_bimodal.png
	$(PY) examples/subnet_regression.py

clean:
	rm -rf $(VENV) $(VENV_NEW) $(VENV_WHEEL) $(WHEEL_DIR) $(VENV_PEERS)

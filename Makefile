# `make test` and `make demo` build .venv from nothing on a machine with Python 3.11 and reuse it.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo venv clean

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

test: $(STAMP)
	$(PY) -m pytest -q tests

demo: $(STAMP)
	$(PY) examples/pt_bimodal.py --plot pt_bimodal.png
	$(PY) examples/subnet_regression.py

clean:
	rm -rf $(VENV)

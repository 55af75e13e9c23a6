# `make bench` and `make test` do all set-up on a fresh machine: they create .venv if it is
# missing and install the package into it. Nothing needs to be installed beforehand but Python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch where no NVIDIA GPU is visible, the normal build otherwise.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
CONSTRAINTS := constraints/$(if $(HAS_GPU),gpu,cpu).txt

.PHONY: bench test test-fast lint install install-dev clean gpu-bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: $(PY) pyproject.toml $(CONSTRAINTS)
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[dev]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

bench: install
	$(VENV)/bin/dlscale bench

# Two pytest-xdist workers, a test file each (its module fixtures run once): most tests wait on
# subprocesses (torchrun, SLURM jobs, ReFrame), so two workers keep a 2-core machine busy.
# TEST_WORKERS=0 runs the suite in one process. tests/README.md lists the tiers and their times.
TEST_WORKERS ?= 2
test: install-dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The unit tier without its slow tests (marked `slow`: inductor compiles, spawned ranks, subprocesses):
# what a change to one module needs first, in under a minute on 2 cores.
test-fast: install-dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/unit -m "not slow"

# ruff over every Python file of src/, tests/, benchmarks/ and scripts/ (`ruff check --show-files` lists
# them), then the layout's import contracts (pyproject.toml, [tool.importlinter]).
lint: install-dev
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/lint-imports

# The GPU campaign (docs/benchmarks.md): tests and measurements on a CUDA machine as it is, in under
# 8 minutes. It installs nothing (the GPU machine has no package registry): the machine's python3
# with src/ on PYTHONPATH. GPU_OUT receives gpu.json, gpu.md and gpu.log.
GPU_OUT ?= runs/gpu
gpu-bench:
	PYTHONPATH=src $(PYTHON) benchmarks/gpu.py --out $(GPU_OUT)

clean:
	rm -rf $(VENV) runs .pytest_cache

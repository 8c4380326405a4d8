# Two commands set up a fresh machine:  `make up`  and  `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: up test check deps venv bench clean

# Property tests of the pure core, run a second time from a fresh random seed by `make test`
PROPERTY_TESTS := tests/test_convergence.py tests/test_convergence_stateful.py tests/test_ops.py \
                  tests/test_blocks.py tests/test_causal.py tests/test_idgen.py tests/test_shards_stateful.py
# Run again on the pure build (BRAID_PURE=1) after the suite: seconds, not minutes
PURE_TESTS := tests/test_convergence.py tests/test_ops.py tests/test_blocks.py tests/test_causal.py \
              tests/test_idgen.py tests/test_resp_parser.py tests/test_rdb.py tests/test_entry_reply.py

# What mypy checks (pyproject.toml's [tool.mypy]), clean: `make check` and `make test` run it.
MYPY_CHECKED := crdt node pipeline

# The modules setup.py compiles with mypyc: editing one rebuilds the extensions (a compiled
# module older than its source is not used: node/build.py has the source imported instead).
COMPILED_SOURCES := $(shell sed -n 's/^    "\(.*\.py\)",$$/\1/p' setup.py)

$(STAMP): pyproject.toml setup.py Makefile $(COMPILED_SOURCES)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# what setup.py compiles with, in this venv (no build isolation: nothing more to fetch, and a
	@# rebuild after an edit reuses it); pinned here, as the build needs it before the package exists
	@# (librt: mypyc's runtime library, which node/interop/lzf.py builds against; pyproject.toml's pin)
	$(BIN)/pip install -q 'setuptools==84.2.1' 'mypy==2.4.1' 'librt==0.17.0'
	@# builds the compiled modules in place (setup.py), or the pure build if no C compiler is installed;
	@# without setuptools' boxed notice that every editable install gets (it reads like a failure)
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install -q --no-build-isolation -e '.[test,pipeline,docker]'
	@# the pure build is not stamped: once make deps has installed the compiler, the next make compiles
	@if $(BIN)/python -c 'import crdt.blocks as b, sys; sys.exit(not b.__file__.endswith(".so"))'; then \
	  echo "braid: installed the compiled build"; touch $(STAMP); \
	else echo "braid: installed the pure-Python build, which is slower: no C compiler or no Python" \
	  "headers (make deps installs them, and the next make builds the compiled one)"; fi

venv: $(STAMP)

# System packages the tests and benchmarks use: Debian's redis-server (the
# reference for differential tests), redis-tools (redis-cli, redis-benchmark) and tcl
# (tclsh runs Redis's own stream test suites, which the test fetches from Debian's archive).
# Docker (docker.io, docker-compose, debootstrap, a running dockerd and the images) is set up
# by deploy/docker/build.sh, which tests/test_docker.py runs.
deps:
	@# a C compiler and Python's headers compile the hot modules (setup.py)
	@command -v gcc >/dev/null && $(PY) -c 'import os, sys, sysconfig; \
	  sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc python3-dev; }
	@command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools; }
	@# the packaged service is not wanted: tests start their own servers
	@-systemctl disable --now redis-server >/dev/null 2>&1 || true
	@-service redis-server stop >/dev/null 2>&1 || true
	@command -v tclsh >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tcl; }
	@# Java 17 for Spark (the pipeline tests run a local Spark)
	@command -v java >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }

# redis-cli (Debian's redis-tools) for the README's first commands: installed when missing and we
# are root; otherwise the two ways to get a client are printed and the cluster starts anyway.
up: venv
	@command -v redis-cli >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "redis-cli is missing: installing Debian's redis-tools (apt-get install redis-tools)"; \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-tools; } \
	      || echo "could not install redis-tools: use redis-py instead (see below)"; \
	  else \
	    echo "redis-cli is missing; install it with:  sudo apt-get install redis-tools"; \
	    echo "or talk to a region from Python:  $(BIN)/python -c \"import redis; print(redis.Redis(port=7001).ping())\""; \
	  fi; }
	@$(BIN)/braid up

# deps first: the compiler must be there when the venv builds the compiled modules
test: deps venv
	$(BIN)/ruff check crdt node chaos pipeline tests bench
	$(BIN)/mypy $(MYPY_CHECKED)
	@# the suite runs on the compiled build (tests/test_compiled.py fails if it is not), in two
	@# lanes side by side, each printed whole when it ends: the tests marked pure (tests/kinds.py:
	@# CPU only) and then the longest runs of real processes (TEST_LANE_FILES: the live chaos
	@# suite, Docker, network namespaces, the previous release's build for the mixed-version
	@# cluster, Spark's - none of them twice at once), beside the other tests
	@# that start processes (mostly waiting for them); each lane's test servers take ports from a
	@# window of its own, below the kernel's range for outgoing connections (node/testing.py)
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-lane test-rest
	@# the pure source too: the compiled build's checks, the core's property tests and a short
	@# simulation batch, with every crdt/, node/resp and node/interop module imported from its .py file
	BRAID_PURE=1 HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest -q \
	  tests/test_compiled.py $(PURE_TESTS)
	@# the planted bugs patch crdt/ functions, which compiled callers call past the patch
	BRAID_PURE=1 BRAID_SIM_TIME_BOX=5 $(BIN)/python -m pytest -q tests/test_sim.py -k 'planted or time_boxed'
	@# the pure property tests once more, from a fresh seed (printed, so a failure replays)
	seed=$${HYPOTHESIS_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	  replay="HYPOTHESIS_PROFILE=fresh $(BIN)/python -m pytest --hypothesis-seed=$$seed $(PROPERTY_TESTS)"; \
	  echo "property tests from a fresh seed: $$seed (replay: $$replay)"; \
	  HYPOTHESIS_PROFILE=fresh $(BIN)/python -m pytest -q --hypothesis-seed=$$seed $(PROPERTY_TESTS) \
	  || { echo "FAILED from seed $$seed; replay: $$replay"; exit 1; }

TEST_PYTEST := BRAID_EXPECT_COMPILED=1 HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest --durations=15

TEST_LANE_FILES := tests/test_chaos.py tests/test_chaos_shards.py tests/test_docker.py tests/test_deploy.py \
                   tests/test_netns.py tests/test_k8s.py tests/test_mixed_versions.py tests/test_pipeline.py \
                   tests/test_pipeline_shards.py tests/test_tour_spark.py

.PHONY: test-pure test-lane test-rest
test-pure:
	$(TEST_PYTEST) -m pure --basetemp=$${TMPDIR:-/tmp}/braid-tests-pure $(PYTEST_ARGS)
test-lane: test-pure
	BRAID_TEST_PORTS=20000-29999 $(TEST_PYTEST) -m "not pure" --basetemp=$${TMPDIR:-/tmp}/braid-tests-lane $(PYTEST_ARGS) $(TEST_LANE_FILES)
test-rest:
	BRAID_TEST_PORTS=10000-19999 $(TEST_PYTEST) -m "not pure" --basetemp=$${TMPDIR:-/tmp}/braid-tests-rest $(PYTEST_ARGS) \
	  $(addprefix --ignore=,$(TEST_LANE_FILES))

# The quick check before a commit, under a minute on two cores: ruff, mypy, and the tests marked
# pure (tests/kinds.py: no process, no socket, nothing outside Python).  They run as `make test`
# runs them but for two settings that keep the minute: the `check` Hypothesis profile
# (derandomized as `ci`, 20 examples where a test does not set its own number) and a 3 s batch of
# random simulation seeds instead of 20 (BRAID_SIM_TIME_BOX).  Two pytest processes share them,
# one per core (pytest-xdist is not installed): the simulation and the convergence state machine,
# about half the time, in one, the rest in the other.  `make test` runs everything.
CHECK_PYTEST := HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-check} BRAID_SIM_TIME_BOX=$${BRAID_SIM_TIME_BOX:-3} \
                $(BIN)/python -m pytest -q -m pure $(PYTEST_ARGS)
CHECK_SPLIT  := tests/test_sim.py tests/test_convergence_stateful.py

check: venv
	$(BIN)/ruff check crdt node chaos pipeline tests bench
	$(BIN)/mypy $(MYPY_CHECKED)
	@$(MAKE) --no-print-directory -j2 --output-sync=target check-pure-split check-pure-rest

.PHONY: check-pure-split check-pure-rest
check-pure-split:
	$(CHECK_PYTEST) $(CHECK_SPLIT)
check-pure-rest:
	$(CHECK_PYTEST) $(addprefix --ignore=,$(CHECK_SPLIT))

bench: venv deps
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.replication
	$(BIN)/python -m bench.durability
	$(BIN)/python -m bench.pipeline

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache
	@# the compiled modules (built in place beside their source) and mypyc's shared library
	find crdt node -name '*.so' -delete
	rm -f *__mypyc*.so

# Two commands set up a fresh machine:  `make up`  and  `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: up test deps venv bench clean

# Property tests of the pure core, run a second time from a fresh random seed by `make test`
PROPERTY_TESTS := tests/test_convergence.py tests/test_convergence_stateful.py tests/test_ops.py \
                  tests/test_blocks.py tests/test_causal.py tests/test_idgen.py

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,pipeline,docker]'
	touch $(STAMP)

venv: $(STAMP)

# System packages the tests and benchmarks use: Debian's redis-server (the
# reference for differential tests), redis-tools (redis-cli, redis-benchmark) and tcl
# (tclsh runs Redis's own stream test suites, which the test fetches from Debian's archive).
# Docker (docker.io, docker-compose, debootstrap, a running dockerd and the images) is set up
# by deploy/docker/build.sh, which tests/test_docker.py runs.
deps:
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

test: venv deps
	$(BIN)/ruff check crdt node chaos pipeline tests bench
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest $(PYTEST_ARGS)
	@# the pure property tests once more, from a fresh seed (printed, so a failure replays)
	seed=$${HYPOTHESIS_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	  replay="HYPOTHESIS_PROFILE=fresh $(BIN)/python -m pytest --hypothesis-seed=$$seed $(PROPERTY_TESTS)"; \
	  echo "property tests from a fresh seed: $$seed (replay: $$replay)"; \
	  HYPOTHESIS_PROFILE=fresh $(BIN)/python -m pytest -q --hypothesis-seed=$$seed $(PROPERTY_TESTS) \
	  || { echo "FAILED from seed $$seed; replay: $$replay"; exit 1; }

bench: venv deps
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.replication
	$(BIN)/python -m bench.durability
	$(BIN)/python -m bench.pipeline

clean:
	rm -rf $(VENV) build *.egg-info

# The two commands a newcomer types are `make run` and `make test`; both install into .venv
# when the project's dependency files changed since the last install.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The AsyncAPI CLI (npm), which the suite validates docs/asyncapi.json with; pinned by its lock.
ASYNCAPI := $(VENV)/asyncapi
ASYNCAPI_STAMP := $(ASYNCAPI)/.installed
# Bytecode is written (into the ignored __pycache__ directories), whatever the shell says: where
# PYTHONDONTWRITEBYTECODE is set (CI's machines set it) every process compiled the ~240 modules
# it imports from source, a third of a second of each service's start, and each test worker
# re-did pytest's assertion rewriting of every test module (7 of its 12 s of collection).
unexport PYTHONDONTWRITEBYTECODE
# The project's modules compiled once, on both cores, before the processes that import them
# start side by side (compileall skips what is current: a tenth of a second after the first).
COMPILE := $(BIN)/python -m compileall -q -j 0 libs services tests examples >/dev/null

.PHONY: install run demo test check test-fast bench load eval eval-statements lint up down clean

# setup.py and the C source: the compiled envelope (libs/habitus/crypto/_envelope.c) is built by
# the editable install, so a change to either installs again.
$(STAMP): pyproject.toml setup.py libs/habitus/crypto/_envelope.c
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs what pip would (the same resolution) in seconds rather than half a minute;
	@# pip does it where uv cannot be had or fails.
	@$(BIN)/python -m pip install -qq uv && \
	  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]' || \
	  { $(BIN)/python -m pip install --quiet --upgrade pip && \
	    $(BIN)/python -m pip install --quiet -e '.[dev]'; }
	@# Prometheus and promtool for the rule tests and the live dashboard check: the Debian
	@# package when missing (as root, apt-get, no service started). Not fatal here: the tests
	@# that need it install it the same way, or fail under CI (skip elsewhere) saying why.
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || \
	  $(BIN)/python -m tests.support.prometheus || true
	@touch $(STAMP)

# Without npm the AsyncAPI validation test skips and says why; with npm a failed install fails.
# The tree is written once per machine and lock file and linked (tools/asyncapi/install.sh).
$(ASYNCAPI_STAMP): tools/asyncapi/package.json tools/asyncapi/package-lock.json tools/asyncapi/install.sh
	@if command -v npm >/dev/null 2>&1; then \
	  mkdir -p $(VENV) && tools/asyncapi/install.sh $(ASYNCAPI) && touch $@; \
	else echo "npm not found: the AsyncAPI CLI is not installed, its validation test will skip"; fi

# The two installs (pip, npm) are independent and mostly wait on the network: they run side by
# side, each one's output kept together.
install:
	@$(MAKE) --no-print-directory --jobs=2 --output-sync=target $(STAMP) $(ASYNCAPI_STAMP)

run: $(STAMP)
	@$(COMPILE)
	$(BIN)/habitus up

demo: $(STAMP)
	@$(COMPILE)
	$(BIN)/habitus demo

# Three workers on two cores: the suite waits on servers and processes a third of the time, so a
# third worker fills it (two: 567 s, three: 440 s; docs/testing.md). Whole files per worker: a
# module's shared stack (its services, in-process) starts once instead of on every worker. Files
# in collection order (chaos and e2e, the heaviest, first): xdist's default puts the files with
# most tests first, which left the demo sandbox test (one test, the heaviest) to run last.
test: install
	@$(COMPILE)
	$(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder tests

# The reference implementation (openjarvis, issue 12's side-by-side bench) goes into a venv of its
# own, never the project's: --no-deps plus httpx, the one module its traces package needs. Once
# installed it is not installed again; when it cannot be, the side-by-side bench skips and says so.
bench: $(STAMP)
	@test -f var/bench/openjarvis-venv/.installed || { \
	  { test -x var/bench/openjarvis-venv/bin/python || $(PYTHON) -m venv var/bench/openjarvis-venv; } && \
	  var/bench/openjarvis-venv/bin/python -m pip install --quiet --no-deps openjarvis==1.0.4 && \
	  var/bench/openjarvis-venv/bin/python -m pip install --quiet httpx && \
	  var/bench/openjarvis-venv/bin/python -c "from openjarvis.traces.store import TraceStore; from openjarvis.traces.analyzer import TraceAnalyzer" && \
	  touch var/bench/openjarvis-venv/.installed; } || \
	  echo "bench: the reference openjarvis could not be installed; its comparison will skip"
	@$(COMPILE)
	$(BIN)/python -m pytest tests/bench -p no:cacheprovider -o addopts="" -s

# A realistic mix through a running Habitus (`make run` in another terminal, or HABITUS_URL with
# HABITUS_NATS_URL and HABITUS_DATABASE_URL), and how the whole pipeline keeps up: the report is
# written to var/load/<stamp>/report.md (docs/load.md). LOAD_ARGS="--duration 120 --rate 600".
LOAD_ARGS ?=
load: $(STAMP)
	@$(COMPILE)
	$(BIN)/python -m tests.load.run $(LOAD_ARGS)

# Precision and recall of the LLM extractor on the labelled corpus in examples/eval/; needs a
# real endpoint (HABITUS_LLM_BASE_URL, HABITUS_LLM_MODEL), so it is not part of `make test`.
eval: $(STAMP)
	$(BIN)/python -m services.extractor.evaluate --corpus examples/eval/corpus.jsonl

# Precision and recall of the statement reader (no LLM) on the held-out part of
# examples/eval/statements.jsonl, with every miss listed; `--tune` re-tunes on the tuning part.
eval-statements: $(STAMP)
	$(BIN)/python -m services.producers.evaluate

lint: $(STAMP)
	$(BIN)/ruff check libs services tests examples
	$(BIN)/mypy libs/habitus
	$(BIN)/lint-imports

# The inner loop: lint, types, the import layering and the unit tests (no servers), on both
# cores. `make test` (everything) stays what CI runs.
check: install
	@$(COMPILE)
	$(BIN)/ruff check libs services tests examples
	$(BIN)/mypy libs/habitus
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider tests/unit

up:
	docker compose up --build

down:
	docker compose down

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

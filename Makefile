# The two commands a newcomer types are `make run` and `make test`; both install into .venv
# when the project's dependency files changed since the last install.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run demo test test-fast bench lint up down clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/habitus up

demo: $(STAMP)
	$(BIN)/habitus demo

test: $(STAMP)
	$(BIN)/python -m pytest tests

bench: $(STAMP)
	$(BIN)/python -m pytest tests/bench -p no:cacheprovider -o addopts="" -s

lint: $(STAMP)
	$(BIN)/ruff check libs services tests
	$(BIN)/mypy libs/habitus

up:
	docker compose up --build

down:
	docker compose down

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

# One command per chore; CI runs `make test` through .ci/run.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test lint format typecheck bench soak browser-deps clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

## Load the sample traces into toolmeter-demo.duckdb and open the dashboard on 127.0.0.1:8501.
demo: setup
	$(BIN)/toolmeter demo

## Lint, type-check and run every test.
test: setup lint typecheck
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: setup
	$(BIN)/mypy

## Every benchmark, each printing its table beside a baseline measured in the same run (BENCHMARKS.md).
bench: setup
	$(BIN)/python benchmarks/bench_collector.py
	$(BIN)/python benchmarks/bench_receiver.py
	$(BIN)/python benchmarks/bench_memory.py
	$(BIN)/python benchmarks/bench_redact.py
	$(BIN)/python benchmarks/bench_peers.py
	$(BIN)/python benchmarks/bench_dashboard.py --calls 1000000,10000000
	$(BIN)/python benchmarks/bench_lake.py
	$(BIN)/python benchmarks/bench_windowcost.py

## The long run: 100,000 hostile-input cases, then a stream into a receiver killed and restarted.
soak: setup
	$(BIN)/python benchmarks/soak.py

clean:
	rm -rf $(VENV) toolmeter-demo.duckdb .pytest_cache .mypy_cache .ruff_cache

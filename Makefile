# Two set-up commands on a fresh machine with Python 3.11 and make:
#   make demo   -- virtual environment, install, run ToPS on the built-in POS stream
#   make test   -- virtual environment, install (with the Spark extra; its tests need Java 17+), lint (ruff),
#                  run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dpstream needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dpstream demo --out demo-output --force

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks --benchmark-only -o addopts="" --benchmark-columns=min,median,max

clean:
	rm -rf $(VENV) demo-output .pytest_cache .benchmarks

# Two set-up commands on a fresh machine with Python 3.11 and make:
#   make demo   -- virtual environment, install, run ToPS on the built-in POS stream
#   make test   -- virtual environment, install (with the Spark extra; its tests need Java 17+), lint (ruff),
#                  run the whole test suite (which runs clients/js's tests under Node: npm ci, npm test)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The dashboard's browser test drives Debian's headless Chromium (never a browser Playwright downloads).
CHROMIUM := /usr/bin/chromium

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dpstream needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,postgres,spark]'
	@# the tests start their own PostgreSQL server: its Debian binaries, when missing
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }
	@# the Spark tests run PySpark in local mode on Java 17+, when missing
	@command -v java >/dev/null 2>&1 || [ -x "$$JAVA_HOME/bin/java" ] || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; }
	@# the JavaScript client's tests (clients/js) run under Node 20.19+ with npm, when missing
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dpstream demo --out demo-output --force

$(CHROMIUM):
	@[ "$$(id -u)" = 0 ] || { echo "the dashboard test needs Debian's chromium: sudo apt-get install chromium"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test: $(STAMP) $(CHROMIUM)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks --benchmark-only -o addopts="" --benchmark-columns=min,median,max

clean:
	rm -rf $(VENV) demo-output .pytest_cache .benchmarks

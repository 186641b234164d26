# Set-up and everyday commands.  `make demo` and `make test` do all set-up on a
# fresh machine: the virtualenv and Python packages, the Debian Prometheus
# package, the Kafka and Spark connector jars (Maven, cached in ~/.cache/ivm-kafka).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast test-integration lint bench-triangles bench-qhier bench-fivm bench-patterns bench-e2e bench-placement bench-choices bench-stops bench-snapshots bench-paper-queries clean

setup: $(STAMP) .local/.prometheus .local/.artifacts

# A line per step, and per package and kernel while pip works (its verbose log, filtered): the kernels take
# minutes to compile on a small machine, which should not pass in silence.
$(STAMP): pyproject.toml setup.py $(wildcard ivm/*/_*.pyx ivm/*/*/_*.pyx ivm/*/*/*/_*.pyx)
	@echo "setup 1/3: the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "setup 2/3: pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "setup 3/3: the project with its extras test and bench, then its compiled kernels (ivm/**/_*.pyx: \
	a few minutes on 2 cores; a line as each starts)"
	@bash -o pipefail -c "$(BIN)/pip install -v -e '.[test,bench]' 2>&1 | grep --line-buffered -E \
	  \"^ *(Collecting |Building editable for|building '|Successfully installed|ERROR|error:)\" \
	  | sed -u -e \"s/^ *building '\\(.*\\)' extension/  compiling the kernel \\1/\""
	@$(BIN)/python -c "from ivm.kernels import installed_kernels, summary; print(summary(installed_kernels()))"
	touch $@

# Prometheus from Debian's package (the integration tests scrape the processor with it).
.local/.prometheus:
	@mkdir -p .local
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing the Debian package prometheus"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@touch $@

# The Kafka broker and Spark's Kafka connector, fetched with Maven (cached between runs).
.local/.artifacts: $(STAMP)
	$(BIN)/ivm local fetch
	@touch $@

demo: setup
	@echo "setup done; starting the demo"
	$(BIN)/ivm demo

# pytest-xdist workers, each with its own broker, Spark and registry (tests/conftest.py), the longest tests
# first (tests/scheduling.py, durations recorded in tests/durations.json): the integration tests mostly wait
# (JVM start-ups, micro-batches), so more workers than cores pay.  TEST_WORKERS=0: one process, no workers.
TEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

test: setup
	$(BIN)/pytest $(XDIST)

# two pytest-xdist workers: the unit tests are CPU-bound and independent
test-fast: setup
	$(BIN)/pytest -n 2 --dist loadgroup --no-loadscope-reorder -m "not integration and not slow"

test-integration: setup
	$(BIN)/pytest $(XDIST) -m integration

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench-triangles: setup
	$(BIN)/python bench/triangles.py

bench-qhier: setup
	$(BIN)/python bench/qhier.py

bench-fivm: setup
	$(BIN)/python bench/fivm.py

bench-patterns: setup
	$(BIN)/python bench/patterns.py

bench-e2e: setup
	$(BIN)/python bench/e2e.py

bench-placement: setup
	$(BIN)/python bench/placement.py
	$(BIN)/python bench/placement.py --memory

bench-choices: setup
	$(BIN)/python bench/choices.py

bench-stops: setup
	$(BIN)/python bench/stops.py

bench-snapshots: setup
	$(BIN)/python bench/snapshots.py

bench-paper-queries: setup
	$(BIN)/python bench/paper_queries.py

clean:
	rm -rf .local/demo .local/test-logs .pytest_cache

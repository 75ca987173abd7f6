# fleetcast: `make demo` and `make test` are all a new machine needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
SAM_VENV := .venv-sam
CHECKOV_VENV := .venv-checkov
# The SageMaker Python SDK (examples/sdk_client.py): large, and its pins conflict with ours.
SDK_VENV := .venv-sdk
# The AWS CLI v1: the README's tour uses it against the local stack.
AWSCLI_VENV := .venv-awscli
# statsforecast for make accuracy's peers: it needs pandas < 3, fleetcast pins pandas 3.
PEERS_VENV := .venv-peers
# AutoGluon-TimeSeries for make accuracy alone (5.8 GB installed, 3.4 GB of it the CUDA
# wheels PyPI's torch for Linux x86_64 requires): not in `make install`, make test or
# accuracy-smoke.
AUTOGLUON_VENV := .venv-autogluon
# schemathesis for make fuzz and its smoke test: a client from outside the stack's process.
FUZZ_VENV := .venv-fuzz
STAMP := $(VENV)/.installed
# Each tool's environment is installed by the targets that use it, so `make demo` installs
# the main one (and SAM's translator, which the local stack's IAM runs), not 1.8 GB of
# SAM CLI, checkov, the SageMaker SDK and the accuracy peers before its first result.
SAM_TRANSLATOR := $(SAM_VENV)/.translator
SAM_STAMP := $(SAM_VENV)/.installed
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
SDK_STAMP := $(SDK_VENV)/.installed
AWSCLI_STAMP := $(AWSCLI_VENV)/.installed
PEERS_STAMP := $(PEERS_VENV)/.installed
AUTOGLUON_STAMP := $(AUTOGLUON_VENV)/.installed
FUZZ_STAMP := $(FUZZ_VENV)/.installed
TOOLS := $(SAM_STAMP) $(CHECKOV_STAMP) $(SDK_STAMP) $(AWSCLI_STAMP) $(PEERS_STAMP) $(FUZZ_STAMP)

.PHONY: help install tools lock demo up test test-unit test-integration test-e2e lint typecheck chromium \
        bench bench-smoke accuracy accuracy-hourly accuracy-smoke accuracy-record accuracy-replay load scale clean openapi email-preview images \
        test-images fuzz

help:  ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.9

# --compile-bytecode: every installed module's bytecode written at install. uv writes none
# by default, and where PYTHONDONTWRITEBYTECODE is set (as on the bench's machines) no
# import writes it either, so every process compiled what it imported: lightgbm's import
# (the fleet family, each training job) cost 0.9 s of CPU instead of 0.2 s.
$(STAMP): $(UV) pyproject.toml requirements/lock.txt
	$(UV) pip install --quiet --compile-bytecode -p $(BIN)/python -c requirements/lock.txt -e '.[dev]'
	touch $@

# SAM's translator alone, at the SAM CLI's pins: the local stack translates template.yaml
# with it to enforce its IAM (fleetcast.embedded.iam.roles). The rest of SAM comes with
# $(SAM_STAMP), into the same environment.
$(SAM_TRANSLATOR): $(UV) requirements/sam.lock.txt
	[ -x $(SAM_VENV)/bin/python ] || $(UV) venv --quiet -p $(BIN)/python $(SAM_VENV)
	$(UV) pip install --quiet -p $(SAM_VENV)/bin/python -c requirements/sam.lock.txt aws-sam-translator
	touch $@

# .venv-sam, .venv-checkov, .venv-sdk, .venv-awscli, .venv-peers, .venv-fuzz from
# requirements/<name>.lock.txt
$(VENV)-%/.installed: $(UV) requirements/%.lock.txt
	[ -x $(VENV)-$*/bin/python ] || $(UV) venv --quiet -p $(BIN)/python $(VENV)-$*
	$(UV) pip install --quiet -p $(VENV)-$*/bin/python -r requirements/$*.lock.txt
	touch $@

install: $(STAMP) $(SAM_TRANSLATOR) $(TOOLS)  ## Create every virtual environment (idempotent)

tools: $(SAM_STAMP) $(AWSCLI_STAMP) $(SDK_STAMP)  ## The SAM CLI (deploy), the AWS CLI and the SageMaker SDK (the README tour)

lock: $(UV)  ## Re-resolve the pinned lock files from pyproject.toml and requirements/*.in
	$(UV) pip compile --quiet -p $(BIN)/python --extra dev pyproject.toml -o requirements/lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/sam.in -o requirements/sam.lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/checkov.in -o requirements/checkov.lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/sdk.in -o requirements/sdk.lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/awscli.in -o requirements/awscli.lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/peers.in -o requirements/peers.lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/autogluon.in -o requirements/autogluon.lock.txt
	$(UV) pip compile --quiet -p $(BIN)/python requirements/fuzz.in -o requirements/fuzz.lock.txt

demo: $(STAMP) $(SAM_TRANSLATOR)  ## Run the whole pipeline locally: 1000 customers, 2 training instances
	$(BIN)/fleetcast demo --customers 1000 --instances 2

up: $(STAMP) $(SAM_TRANSLATOR)  ## Start the embedded local stack in the foreground
	$(BIN)/fleetcast up

# Needs Docker and AWS credentials; see README "Deploy to AWS".
CONFIG_ENV ?= default
images: $(STAMP)  ## Build and push the images to ECR; URIs into samconfig.toml (CONFIG_ENV=default)
	$(BIN)/fleetcast images --config-env $(CONFIG_ENV)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint containers/*/Dockerfile

typecheck: $(STAMP)
	$(BIN)/mypy src layers/common containers/forecasters containers/processing containers/training containers/inference \
		functions/cost_report/fleetcast_cost
	for handler in functions/*/app.py; do $(BIN)/mypy --no-error-summary $$handler || exit 1; done

test-unit: $(STAMP) $(SAM_TRANSLATOR)  ## Unit tests: no sockets
	$(BIN)/pytest tests/unit -q

test-integration: $(STAMP) $(SAM_TRANSLATOR) $(SAM_STAMP) $(CHECKOV_STAMP)  ## Integration tests against a moto server
	$(BIN)/pytest tests/integration -q

test-e2e: $(STAMP) $(SAM_TRANSLATOR) $(AWSCLI_STAMP) $(SDK_STAMP) $(FUZZ_STAMP) chromium  ## End-to-end tests on the embedded local stack
	$(BIN)/pytest tests/e2e -q -m "not own_stack"
	$(BIN)/pytest tests/e2e -q -m own_stack

# Each container in an environment built from its Dockerfile alone (its pip install and its
# COPY lines; fleetcast.image_environments), through a run and a forecast on a local stack
# (about a minute and a half). make test runs it with the other own-stack tests.
test-images: $(STAMP) $(SAM_TRANSLATOR)  ## The containers from what their Dockerfiles install and copy, nothing else
	$(BIN)/pytest tests/e2e/test_image_environments.py -q -m images

# Each tier in its own process: unit tests (no sockets) never share one with the servers
# that integration and end-to-end tests keep running.
test: $(STAMP) $(SAM_TRANSLATOR) $(TOOLS) lint typecheck chromium  ## Everything: lint, types, unit, integration, e2e
	$(BIN)/pytest tests/unit -q
	$(BIN)/pytest tests/integration -q
	$(BIN)/pytest tests/e2e -q --durations=10 -m "not own_stack"
	$(BIN)/pytest tests/e2e -q -m own_stack
	$(BIN)/python -m bench --smoke
	$(BIN)/python -m bench.accuracy --smoke

openapi: $(STAMP)  ## Regenerate docs/openapi.json from the forecast API's routes
	$(BIN)/python -m fleetcast.openapi

# A local stack of its own on 127.0.0.1 with 50 customers trained, then schemathesis for what
# is left of 150 s; make test runs a few hundred of its requests (tests/e2e/test_api_contract.py).
fuzz: $(STAMP) $(SAM_TRANSLATOR) $(FUZZ_STAMP)  ## schemathesis, every check, against a local stack's API (<= 3 min); non-zero on any failure
	$(BIN)/python -m fleetcast.fuzz

email-preview: $(STAMP) chromium  ## Render the latest cost-report e-mail (the outbox) to a PNG
	$(BIN)/python -m fleetcast.email_preview

# Headless Chromium (a Debian package) renders the e-mail preview and the accuracy report;
# the e2e test of `fleetcast report` draws it. Installing needs root: without it, say so
# (that test then skips its rendering and says why).
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) \
		|| echo "warning: chromium could not be installed (apt-get needs root): the report's rendering test will be skipped"

bench: $(STAMP) $(SAM_TRANSLATOR)  ## Benchmark suite vs the public AWS sample (~8 min): bench/results.json, chart, README table
	$(BIN)/python -m bench --results bench/results.json --chart bench/results.png --readme README.md

bench-smoke: $(STAMP) $(SAM_TRANSLATOR)  ## The benchmark suite at tiny sizes: checks its answers, not its speed
	$(BIN)/python -m bench --smoke

# make accuracy's AutoGluon environment: announced, since the first install is 5.8 GB.
$(AUTOGLUON_STAMP): $(UV) requirements/autogluon.lock.txt
	@echo "make accuracy: installing AutoGluon-TimeSeries and torch (with PyPI's CUDA wheels: 5.8 GB) into $(AUTOGLUON_VENV), once"
	[ -x $(AUTOGLUON_VENV)/bin/python ] || $(UV) venv --quiet -p $(BIN)/python $(AUTOGLUON_VENV)
	$(UV) pip install --quiet -p $(AUTOGLUON_VENV)/bin/python -r requirements/autogluon.lock.txt
	touch $@

accuracy: $(STAMP) $(SAM_TRANSLATOR) $(PEERS_STAMP) $(AUTOGLUON_STAMP)  ## Forecast accuracy on real meter data, daily (two windows) and hourly (day-ahead, 30 days, day-ahead from a rolling origin), vs naive, Prophet, statsforecast, mlforecast, AutoGluon (~90 min; installs AutoGluon first): bench/accuracy-results.json, chart, README tables
	$(BIN)/python -m bench.accuracy --results bench/accuracy-results.json --chart bench/accuracy.png --readme README.md

accuracy-hourly: $(STAMP) $(SAM_TRANSLATOR) $(PEERS_STAMP) $(AUTOGLUON_STAMP)  ## make accuracy's hourly part alone (~65 min): its figures replace only the hourly ones
	$(BIN)/python -m bench.accuracy --hourly-only --results bench/accuracy-results.json --readme README.md

accuracy-smoke: $(STAMP) $(SAM_TRANSLATOR) $(PEERS_STAMP)  ## make accuracy on a handful of series, both windows and hourly, without AutoGluon (never installs torch): checks its answers
	$(BIN)/python -m bench.accuracy --smoke

REPLAY_DIR ?= .fleetcast/accuracy-replay
accuracy-record: $(STAMP) $(SAM_TRANSLATOR) $(PEERS_STAMP)  ## Every customer's candidates of make accuracy's daily windows, from its jobs (~1 min), for accuracy-replay
	$(BIN)/python -m bench.accuracy.replay record $(REPLAY_DIR)

accuracy-replay: $(STAMP) $(PEERS_STAMP)  ## A choice rule (RULE=module:function; default the job's own) on accuracy-record's candidates, in seconds
	$(BIN)/python -m bench.accuracy.replay check $(REPLAY_DIR) $(if $(RULE),--rule $(RULE))

scale: $(STAMP) $(SAM_TRANSLATOR)  ## 100,000 customers x 730 days end to end on the local stack, then a 1% incremental run (long: see docs/scale.md)
	$(BIN)/python -m bench.scale --customers 100000 --results bench/scale-results.json

load: $(STAMP) $(SAM_TRANSLATOR)  ## Load test on the local stack: 1000 customers, 50 clients for 60 s, a third of the models fit
	$(BIN)/python bench/load.py --customers 1000 --clients 50 --seconds 60

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) $(SDK_VENV) $(AWSCLI_VENV) $(PEERS_VENV) $(AUTOGLUON_VENV) $(FUZZ_VENV) .aws-sam .fleetcast .pytest_cache .mypy_cache .ruff_cache

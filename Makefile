# `make run` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DVC_NO_ANALYTICS := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 90
export TOKENIZERS_PARALLELISM := false
# make test's pytest workers (pytest-xdist; 0: the tests run in this process, one after another). The
# slow tier runs in one process: its pipelines each use both cores, and two at once took longer.
TEST_WORKERS ?= 2
# more options for make run's pipeline, e.g. RUN_ARGS="-S cluster.engine_scope=run" (one vLLM server per run)
RUN_ARGS ?=

.PHONY: install lint data model run test test-slow test-manual bench clean

install: $(STAMP)
	@bash scripts/web_assets.sh vendor/web  # idempotent: refetches only what is missing

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh $(PY) $(VENV)
	touch $(STAMP)

data: install
	$(BIN)/sweetflow data pull

model: install
	$(BIN)/sweetflow model prepare

run: data model
	$(BIN)/sweetflow run --baselines mtdpo,rft $(RUN_ARGS)
	$(BIN)/sweetflow compare --task elicitation

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint data model
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not gpu and not manual" --durations=25

test-slow: data model
	$(BIN)/pytest -q -m "slow and not manual" --durations=5

test-manual: data model
	$(BIN)/pytest -q -m "manual"

bench: data model
	$(BIN)/python benchmarks/learning.py
	$(BIN)/python benchmarks/scoring.py
	$(BIN)/python benchmarks/scoring_ray.py
	$(BIN)/python benchmarks/rollout.py
	$(BIN)/python benchmarks/vllm_compile.py

clean:
	rm -rf $(VENV)

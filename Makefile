# Guardian: every target installs what it needs (virtualenv, packages, Kafka jars) and is idempotent.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEVICES ?= 20
PYTEST_ARGS ?=

.PHONY: venv test test-unit check demo reliability chaos bench bench-quick kafka-up kafka-down clean \
	docker test-docker docker-tier

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

## make test: the whole suite (unit tier without a broker, in two processes; integration tier on a real Kafka broker).
test: $(STAMP)
	scripts/ensure-debian-tools chromium:chromium kcat:kcat npm:npm fonts-noto-cjk
	$(BIN)/guardian kafka fetch
	$(BIN)/python -m pytest -n 2 tests/unit $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m "not reliability and not docker" tests/integration $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 tests/unit $(PYTEST_ARGS)

## make check: lint and strict types.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## make demo: local broker, worker, a simulated fleet of $(DEVICES) devices, a summary and an HTML report.
demo: $(STAMP)
	$(BIN)/guardian demo --devices $(DEVICES) --out out/demo

reliability: $(STAMP)
	$(BIN)/guardian kafka fetch
	$(BIN)/python -m pytest -m reliability $(PYTEST_ARGS)

## make chaos [SEED=n] [DURATION=s] [SHAPE=storm|scale]: one seeded chaos run against replay (see README).
SEED ?=
DURATION ?= 240
SHAPE ?= storm
chaos: $(STAMP)
	$(BIN)/guardian kafka fetch
	$(BIN)/python -m chaos $(if $(SEED),--seed $(SEED)) --duration $(DURATION) --shape $(SHAPE)

bench: $(STAMP)
	$(BIN)/guardian bench --out out/bench

bench-quick: $(STAMP)
	$(BIN)/guardian bench --quick --out out/bench

## make docker: the images of docker-compose.yml (built here where no registry answers; cached).
## Starts dockerd (as root) when no engine answers, and leaves it running for `docker compose up`.
docker: $(STAMP)
	$(BIN)/python -m guardian.docker_engine --keep -- $(BIN)/python -m guardian.docker_images

## make test-docker: the integration tier on a testcontainers Kafka, and a compose smoke test.
## Installs docker.io when missing, starts dockerd when no engine answers, and stops what it started.
test-docker: $(STAMP)
	scripts/ensure-debian-tools chromium:chromium kcat:kcat npm:npm fonts-noto-cjk
	$(BIN)/guardian kafka fetch
	$(BIN)/python -m guardian.docker_engine -- $(MAKE) --no-print-directory docker-tier

docker-tier: $(STAMP)
	$(BIN)/python -m guardian.docker_images
	GUARDIAN_TEST_BROKER=testcontainers $(BIN)/python -m pytest tests/integration tests/docker \
		-m "not reliability and not own_broker" $(PYTEST_ARGS)

kafka-up: $(STAMP)
	$(BIN)/guardian kafka up

kafka-down: $(STAMP)
	$(BIN)/guardian kafka down

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache

# Two commands for a newcomer: `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench probe install clean-var compose-check

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall whenever pyproject.toml changes.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip check
	touch $(STAMP)

install: $(STAMP)

# `make run TRITONS=3`: the default Triton and local-2, local-3 (devstack/fleet.py).
run: $(STAMP)
	$(PY) -m devstack $(if $(TRITONS),--tritons '$(TRITONS)')

# TEST_ARGS go to scripts/test.sh: `make test TEST_ARGS="--no-checks tests/test_jobs.py"`.
test: $(STAMP)
	bash scripts/test.sh $(TEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	bash scripts/bench.sh

# The hostile-Operator security probe against `make run` in production mode (not in `make test`).
probe: $(STAMP)
	bash scripts/security_probe/run.sh

compose-check:
	POSTGRES_PASSWORD=check DJANGO_SECRET_KEY=check TRITON_API_KEY=check REDIS_PASSWORD=check \
	  docker-compose -f docker-compose.yml config --quiet
	POSTGRES_PASSWORD=check DJANGO_SECRET_KEY=check TRITON_API_KEY=check REDIS_PASSWORD=check \
	  FLEET_REPOSITORIES=/srv/fleet MAIN_HOST_PRIVATE_IP=10.0.0.10 \
	  docker-compose -f docker-compose.yml -f compose/main-host.yml config --quiet
	POSTGRES_PASSWORD=check DJANGO_SECRET_KEY=check TRITON_API_KEY=check REDIS_PASSWORD=check \
	  MAIN_HOST=10.0.0.10 TRITON_SERVER_NAME=gpu1 GPU_HOSTNAME=gpu1-host SERVER_REPOSITORY=/srv/gpu1 \
	  SERVER_API_KEY=check GPU_HOST_PRIVATE_IP=10.0.0.11 docker-compose -f compose/gpu-host.yml config --quiet

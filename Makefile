# The two commands of the quick start, plus helpers. Needs only Python >= 3.11, bash and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test drills lint format clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python >= 3.11 is required (set PYTHON=python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV) || { echo "could not create a virtual environment: install your Python's venv module (Debian: apt install python3-venv)"; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

## make run: the product on embedded defaults at http://127.0.0.1:8000/ (Ctrl-C stops it)
run: $(VENV)/.installed
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py quickstart

## make test: the whole test suite (real Postgres, embedded unless DATABASE_URL is set)
test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## make drills: only the fault drills (docs/drills.md); they also run in `make test`. The marked
## ones (`pytest -m drill`) plus drills that live beside their feature's tests.
DRILLS := tests/test_ingest_crash.py tests/test_drills_celery.py tests/test_scaleout.py \
	tests/test_drills_postgres.py tests/test_drills_prometheus.py tests/test_drills_delivery.py \
	tests/test_drills_home.py tests/test_drills_maintenance.py tests/test_costing_crash.py \
	tests/test_prom_integration.py::test_outage_during_a_pull_is_backfilled_by_the_next \
	tests/test_budget_alerts.py::test_the_webhook_receiver_down_then_up_gets_each_message_exactly_once \
	tests/test_env.py::test_an_unwritable_costcenter_home_is_reported_clearly \
	tests/test_env.py::test_a_full_costcenter_home_is_reported_clearly
drills: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS) $(DRILLS)

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .costcenter-test

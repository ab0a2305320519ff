# The two commands of the quick start, plus helpers. Needs only Python >= 3.11, bash and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint format clean

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

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .costcenter-test

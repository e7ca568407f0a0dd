# `make run`: install into .venv (created if missing) and run the main job on the built-in default
# workload. `make test`: install with the test extras and run the test suite, less the few long
# end-to-end runs (chaos kills, resumes, DDP and Hivemind peers) that `make test-long` runs; CI runs both.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trainwise-installed

.PHONY: run test test-long benchmark install clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found: install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 2; }
	$(PYTHON) -m venv $(VENV)

TEST_STAMP := $(VENV)/.trainwise-test-installed

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.'
	@touch $(STAMP)

# The tests exercise every optional engine and integration with the real library installed.
$(TEST_STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,all]'
	@touch $(STAMP) $(TEST_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/trainwise plan

test: $(TEST_STAMP)
	$(PY) -m pytest -m "not long"

test-long: $(TEST_STAMP)
	$(PY) -m pytest -m long

# Benchmarks write benchmarks/results/NAME.json. same_machine_prediction takes about an hour and
# wants a quiet machine (it pins itself to CPU 1).
benchmark: $(TEST_STAMP)
	$(PY) benchmarks/plan_ranking.py
	$(PY) benchmarks/device_model.py
	$(PY) benchmarks/same_machine_prediction.py --cpu 1

clean:
	rm -rf $(VENV) trainwise-out .pytest_cache

# `make run`: install into .venv (created if missing) and run the main job on the built-in default
# workload. `make test`: install with the test extras and run the test suite, less the long
# end-to-end runs (chaos kills, resumes, DDP and Hivemind peers, integrations) that `make test-long` runs; CI runs both,
# then `make compat` (the wheel on another torch/Python pair). Both install the exact versions of the lock (requirements/*.txt, Python 3.11, with
# hashes), then trainwise itself without dependencies; pyproject.toml declares ranges for users.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
STAMP := $(VENV)/.trainwise-installed
TEST_STAMP := $(VENV)/.trainwise-test-installed
UV ?= uv
LOCK_FLAGS := --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header \
	--annotation-style line --index-strategy unsafe-best-match --index-url https://pypi.org/simple \
	$(if $(wildcard /opt/pypi-more/simple),--extra-index-url file:///opt/pypi-more/simple)

.PHONY: run test test-long compat wheel lock benchmark install clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found: install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 2; }
	$(PYTHON) -m venv $(VENV)

# --no-build-isolation: the editable install builds with the lock's setuptools, no download.
$(STAMP): $(PY) pyproject.toml requirements/run.txt
	$(PIP) -r requirements/run.txt
	$(PIP) --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# The tests exercise every optional engine and integration with the real library installed.
$(TEST_STAMP): $(PY) pyproject.toml requirements/test.txt
	$(PIP) -r requirements/test.txt
	$(PIP) --no-deps --no-build-isolation -e .
	@touch $(STAMP) $(TEST_STAMP)

install: $(STAMP)

# The default job (ResNet-50) needs the [workloads] extra (torchvision): the test lock has it.
run: $(TEST_STAMP)
	$(VENV)/bin/trainwise plan

# The JUnit XML lets `make compat` count the lock pair's tests from this run instead of running them again;
# the 25 slowest tests are listed to keep the default run short (the default run should stay under 6 minutes).
test: $(TEST_STAMP)
	$(PY) -m pytest -m "not long" --junitxml=$(VENV)/junit-default.xml --durations=25

test-long: $(TEST_STAMP)
	$(PY) -m pytest -m long

# Another torch/Python pair: builds the wheel, installs it in a fresh Python 3.12 venv beside torch 2.13.0 (core
# only: profile + plan; then with the test extra: the agent/profile/predict tests), and runs those tests in .venv
# (the lock's pair); writes benchmarks/results/compat.json and fails when fewer than 2 pairs pass or the 3.12
# smoke fails. ~3 GB of downloads into a temporary folder it removes. COMPAT_PAIRS: see benchmarks/compat.py.
COMPAT_PAIRS ?= lock,py3.12-torch2.13.0
compat: $(TEST_STAMP)
	$(PY) benchmarks/compat.py --pairs $(COMPAT_PAIRS) --lock-junit $(VENV)/junit-default.xml

wheel: $(TEST_STAMP)
	$(PY) -m build --no-isolation --outdir dist .

# Re-resolve the lock after editing pyproject.toml; the current files are uv's preferences, so versions
# move only where the ranges force them (add --upgrade-package NAME to move one on purpose).
lock:
	$(UV) pip compile pyproject.toml --extra test --extra all $(LOCK_FLAGS) -o requirements/test.txt
	$(UV) pip compile pyproject.toml -c requirements/test.txt $(LOCK_FLAGS) -o requirements/run.txt

# Benchmarks write benchmarks/results/NAME.json. same_machine_prediction takes about an hour and
# wants a quiet machine (it pins itself to CPU 1).
benchmark: $(TEST_STAMP)
	$(PY) benchmarks/plan_ranking.py
	$(PY) benchmarks/device_model.py
	$(PY) benchmarks/same_machine_prediction.py --cpu 1

clean:
	rm -rf $(VENV) trainwise-out .pytest_cache build dist

# memnav: two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH  ?= cpu
STAMP  := $(VENV)/.memnav-setup-stamp-$(TORCH)
DATA   ?= data/houses
HOUSES ?= 24
SEED   ?= 0

.PHONY: setup demo test test-fast data bench lint clean

# The stamp is older than requirements/setup files when they change: setup re-runs (idempotent).
# TORCH=cuda keeps a CUDA build of torch (GPU training); each TORCH value has its own stamp.
$(STAMP): requirements.txt setup.py setup.cfg package.xml
	@bash scripts/setup.sh "$(PYTHON)" "$(VENV)" "$(TORCH)"
	@rm -f $(VENV)/.memnav-setup-stamp*
	@touch $(STAMP)

setup: $(STAMP) $(DATA)/.complete

$(DATA)/.complete: | $(STAMP)
	$(VENV)/bin/memnav scenes --out $(DATA) --houses $(HOUSES) --seed $(SEED)

data: $(DATA)/.complete

# the main job: the whole stack as separate ROS 2 processes over DDS on the embedded simulator
# then the report of those episodes (runs/demo/report/report.html)
demo: setup
	ROS_AUTOMATIC_DISCOVERY_RANGE=$${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST} \
	  $(VENV)/bin/memnav launch launch/sim.launch.yaml episodes:=5 data:=$(DATA) \
	  results_json:=$(CURDIR)/runs/demo/results.json
	$(VENV)/bin/memnav eval-report runs/demo/results.json --out runs/demo/report

test: setup
	$(PY) -m pytest -q test

test-fast: setup
	$(PY) -m pytest -q -m "not slow" test

bench: setup
	$(VENV)/bin/memnav bench sim --data $(DATA) --json bench_sim.json

lint: setup
	$(VENV)/bin/ruff check memnav test

clean:
	rm -rf $(VENV) build *.egg-info

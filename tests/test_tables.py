"""Both built-in backends against the shipped storage-layer conformance suite."""

from cortexdb.testing.tables import *  # noqa: F401,F403

"""Runnable examples (also used by the docs)."""

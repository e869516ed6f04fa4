"""Retrieval: text and vector indexes, embedders, scoring."""

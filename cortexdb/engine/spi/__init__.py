"""Protocols only: the seams between the engine and its pluggable parts."""

from .extractor import CandidateFact, Extraction, ExtractionContext, Extractor, TermRef
from .kv import Delete, KVSnapshot, KVStore, Put

__all__ = [
    "CandidateFact",
    "Extraction",
    "TermRef",
    "Delete",
    "ExtractionContext",
    "Extractor",
    "KVSnapshot",
    "KVStore",
    "Put",
]

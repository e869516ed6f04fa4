"""Protocols only: the seams between the engine and its pluggable parts."""

from .kv import Delete, KVSnapshot, KVStore, Put
from .extractor import CandidateFact, Extraction, ExtractionContext, Extractor, TermRef

__all__ = ["CandidateFact", "Extraction", "TermRef", "Delete", "ExtractionContext", "Extractor", "KVSnapshot", "KVStore", "Put"]

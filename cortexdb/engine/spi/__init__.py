"""Protocols only: the seams between the engine and its pluggable parts."""

from .blobs import BlobStore, BlobUpload
from .extractor import CandidateFact, Extraction, ExtractionContext, Extractor, TermRef
from .kv import Delete, KVSnapshot, KVStore, Put

__all__ = [
    "BlobStore",
    "BlobUpload",
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

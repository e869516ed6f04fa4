"""Imports and exports (reference §8.11-§8.12, §15): ``imports.ImportService`` and
``exports.ExportService`` run as jobs on the engine's job runner; ``sources/`` maps each source
system's records to envelopes (docs/import-export.md)."""

from .exports import ExportService
from .imports import ImportService

__all__ = ["ExportService", "ImportService"]

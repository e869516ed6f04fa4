"""The engine: actors, derivation, storage seams.  Public names are re-exported by ``cortexdb``."""

"""Blobs in a directory (``FileBlobStore``): the default beside a LevelDB data dir."""

from .blobs import FileBlobStore

__all__ = ["FileBlobStore"]

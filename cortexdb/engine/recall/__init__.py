"""Recall (reference §8.3, §9, §10.1): the request (``request``), the one traversal every read
uses (``traversal``), the coordinator's fan-out and ranking (``coordinator``), the pack and its
streamed events (``pack``) and the 60-second pack cache (``cache``)."""

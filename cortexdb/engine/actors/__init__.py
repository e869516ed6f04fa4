"""Actors: the scope supervisor and actors, the lifecycle bus and the node services."""

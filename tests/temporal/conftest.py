from .harness import world, world_factory  # noqa: F401 - the fixtures every scenario runs in

"""The curated public surface (trio's test_exports habit): nothing private leaks, nothing is missing."""

import cortexdb

PUBLIC = {
    "ActorStatistics", "AllowAll", "BulkResult", "Clock", "CortexError", "DataDirLocked", "Engine",
    "EngineConfig", "ExperienceResult", "IdempotencyConflict", "Internal", "InvalidEnvelope",
    "InvalidScopeGrammar", "LifecycleEvent", "LifecycleFilter", "ManualClock", "NotFound", "PayloadTooLarge",
    "PolicyDenied", "PolicyHook", "ResourceDeleted", "Subscription", "SupervisorStatistics",
    "SystemClock", "open_engine",
}  # fmt: skip


def test_public_names_are_exactly_the_curated_set():
    import types

    exported = {
        name
        for name in dir(cortexdb)
        if not name.startswith("_") and not isinstance(getattr(cortexdb, name), types.ModuleType)
    }
    assert exported == PUBLIC


def test_public_names_come_from_their_home_modules():
    for name in PUBLIC:
        obj = getattr(cortexdb, name)
        assert getattr(obj, "__module__", "cortexdb").startswith("cortexdb"), name


def test_error_codes_are_upper_snake_and_unique_per_class():
    import re

    from cortexdb import errors

    codes = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", cls.error_code), name
        assert 400 <= cls.http_status < 600
        codes.setdefault(cls.error_code, []).append(name)

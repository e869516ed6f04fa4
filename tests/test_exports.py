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

    defined = {}  # one class per code: a subclass may refine its parent's status, not re-set the code
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", cls.error_code), name
        assert 400 <= cls.http_status < 600
        if "error_code" in vars(cls):
            defined.setdefault(cls.error_code, []).append(name)
    assert {code: names for code, names in defined.items() if len(names) > 1} == {}


def test_every_error_class_lives_in_errors_py():
    import importlib
    import pkgutil

    from cortexdb import errors

    for module in pkgutil.walk_packages(cortexdb.__path__, "cortexdb."):
        if ".examples" not in module.name:
            importlib.import_module(module.name)
    pending, found = [errors.CortexError], set()
    while pending:
        for sub in pending.pop().__subclasses__():
            found.add(sub)
            pending.append(sub)
    assert {cls.__qualname__ for cls in found if cls.__module__ != "cortexdb.errors"} == set()
    assert {cls.__name__ for cls in found} <= set(errors.__all__)

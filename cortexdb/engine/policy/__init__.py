"""Policy: capability checks.  The four-tier evaluator arrives with the server; the engine only
needs the hook below."""

from .hook import AllowAll, PolicyHook

__all__ = ["AllowAll", "PolicyHook"]

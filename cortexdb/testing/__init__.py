"""Test support shipped with the package: the KVStore conformance suite and engine fixtures.

A backend (ours or a third party's) is done when it passes the conformance suite::

    # tests/test_my_backend.py
    from cortexdb.testing.kv_conformance import *  # noqa: F401,F403  (the tests)

    @pytest.fixture
    def kv_factory(tmp_path):
        return MyBackendFactory(tmp_path)   # see KVFactory
"""

"""Test support shipped with the package: the KVStore and storage-layer conformance suites
and engine fixtures.

A backend (ours or a third party's) is done when it passes both conformance suites::

    # tests/test_my_backend.py
    from cortexdb.testing.kv_conformance import *  # noqa: F401,F403  (the KVStore tests)
    from cortexdb.testing.tables import *  # noqa: F401,F403  (the storage layer over it)

    @pytest.fixture
    def kv_factory(tmp_path):
        return MyBackendFactory(tmp_path)   # see KVFactory
"""

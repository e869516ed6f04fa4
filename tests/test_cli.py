"""The command line."""

import cortexdb
from cortexdb.cli import main

from .conftest import envelope


async def _seed(path):
    async with cortexdb.open_engine("leveldb", path=path) as engine:
        await engine.experience(envelope("I live in Paris."), wait="consolidated")


def test_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == cortexdb.__version__


def test_inspect_and_rebuild(tmp_path, capsys):
    import trio

    path = str(tmp_path / "d")
    trio.run(_seed, path)
    assert main(["inspect", "--data", path, "--scope", "org:acme/user:alice"]) == 0
    assert "events=1 " in capsys.readouterr().out
    assert main(["rebuild", "--data", path, "--scope", "org:acme/user:alice"]) == 0
    assert main(["inspect", "--data", path, "--scope", "org:acme/user:alice"]) == 0
    out = capsys.readouterr().out
    assert "facts=1" in out and "beliefs=1" in out


def test_bad_scope_is_a_clear_error(tmp_path, capsys):
    assert main(["inspect", "--data", str(tmp_path / "e"), "--scope", "Not A Scope"]) == 2
    assert "INVALID_SCOPE_GRAMMAR" in capsys.readouterr().err

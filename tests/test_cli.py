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


def test_token_keygen_and_mint_make_a_token_the_server_verifies(tmp_path, capsys):
    import json

    from cortexdb.server.auth import Revocations, Verifier, load_issuer_dir

    directory = str(tmp_path / "issuer")
    assert main(["token", "keygen", "--dir", directory, "--iss", "test-issuer"]) == 0
    assert json.loads(capsys.readouterr().out)["iss"] == "test-issuer"
    assert main(["token", "mint", "--dir", directory, "--sub", "service:job", "--tenant", "acme",
                 "--caps", "scope.write,scope.read.local", "--ttl", "600"]) == 0  # fmt: skip
    token = capsys.readouterr().out.strip()
    assert token.startswith("v4.public.")
    import time

    verifier = Verifier([load_issuer_dir(directory)], "acme", Revocations(None), time.time)
    claims = verifier.verify(token)
    assert claims["sub"] == "service:job" and claims["caps"] == ["scope.write", "scope.read.local"]


def test_cli_errors_are_one_line_not_a_traceback(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_:
        main(["token", "mint", "--dir", str(tmp_path / "missing"), "--sub", "user:a", "--tenant", "t"])
    assert "cortexdb: token mint" in str(exit_.value)
    code = main(["serve", "--backend", "memory", "--bind", "127.0.0.1:0", "--embedder", "hash",
                 "--issuer-keys", str(tmp_path / "nope")])  # fmt: skip
    assert code == 2
    assert "INVALID_ISSUER_CONFIG" in capsys.readouterr().err

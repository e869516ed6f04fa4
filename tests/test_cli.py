"""The command line."""

import pytest

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


def _keygen(tmp_path, capsys) -> str:
    directory = str(tmp_path / "issuer")
    assert main(["token", "keygen", "--dir", directory]) == 0
    capsys.readouterr()
    return directory


@pytest.mark.parametrize("flags, says", [
    (["--caps", "scope.write,scope.wrte"], "unknown capability 'scope.wrte' in --caps"),
    (["--caps", "scope.read.*"], "wildcards are not allowed"),
    (["--scopes", "scope.wirte:org:acme/*"], "unknown capability 'scope.wirte' in --scopes"),
    (["--scopes", "scope.write"], "--scopes takes CAP:SCOPE_PATTERN"),
    (["--ttl", str(24 * 3600 + 1)], "exceeds the maximum of 86400 s for 'user:alice'"),
    (["--ttl", "0"], "--ttl must be a positive number"), (["--ttl", "-60"], "--ttl must be a positive number"),
    (["--sub", "service:job", "--ttl", str(30 * 24 * 3600 + 1)], "exceeds the maximum of 2592000 s"),
    (["--ttl", "3600", "--max-ttl", "600"], "exceeds the maximum of 600 s for 'user:alice' (--max-ttl)"),
    (["--max-ttl", str(24 * 3600 + 1)], "--max-ttl 86401 exceeds what the server accepts"),
    (["--max-ttl", "0"], "--max-ttl must be a positive number"),
])  # fmt: skip
def test_token_mint_refuses_what_the_server_would_refuse(tmp_path, capsys, flags, says):
    directory = _keygen(tmp_path, capsys)
    args = ["token", "mint", "--dir", directory, "--tenant", "acme"]
    if "--sub" not in flags:
        args += ["--sub", "user:alice"]
    assert main(args + flags) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("cortexdb: INVALID_MINT_REQUEST: ") and says in err, err


def test_token_mint_accepts_the_maximum_ttls(tmp_path, capsys):
    import time

    from cortexdb.server.auth import Revocations, Verifier, load_issuer_dir

    directory = _keygen(tmp_path, capsys)
    verifier = Verifier([load_issuer_dir(directory)], "acme", Revocations(None), time.time)
    for sub, ttl, extra in (("user:alice", 24 * 3600, []), ("service:job", 30 * 24 * 3600, []),
                            ("agent:x", 600, ["--max-ttl", "600", "--scopes", "scope.write:org:acme/*"])):  # fmt: skip
        assert main(["token", "mint", "--dir", directory, "--sub", sub, "--tenant", "acme", "--ttl", str(ttl),
                     *extra]) == 0  # fmt: skip
        claims = verifier.verify(capsys.readouterr().out.strip())
        assert claims["sub"] == sub and claims["exp"] - claims["iat"] == ttl


def test_serve_with_a_contradictory_jwks_fails_with_one_line(tmp_path, capsys):
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    jwk = {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key)), "alg": "RS256", "kid": "k1"}
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    code = main(["serve", "--backend", "memory", "--bind", "127.0.0.1:0", "--embedder", "hash",
                 "--jwt-issuer", f"https://idp.example={jwks}"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("cortexdb: INVALID_ISSUER_CONFIG: --jwt-issuer https://idp.example: ")
    assert "kid='k1': alg RS256 contradicts its key type" in err


def test_serve_refuses_a_bad_token_leeway(tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--backend", "memory", "--bind", "127.0.0.1:0", "--embedder", "hash",
              "--token-leeway", "forever"])  # fmt: skip
    assert str(exit_.value) == "cortexdb: the token leeway must be 0 to 3600 seconds, not 'forever'"

"""API key config: hashes only, secret file and env var, `sluice keys new`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sluice.apikeys import hash_key, load_keyring, new_key, parse_entries
from sluice.config import AuthConfig, parse_config
from sluice.errors import ConfigError

MODELS = {"m": {"handler": "synthetic"}}
PLAIN = "sk_this-is-a-plaintext-key-0123456789"


def _auth(**auth: Any) -> AuthConfig:
    return parse_config({"models": MODELS, "auth": auth}).auth


@pytest.mark.parametrize("bad", [PLAIN, "sha256:short", "SHA256:" + "a" * 64, "md5:" + "a" * 32])
def test_a_plaintext_or_malformed_hash_is_refused_without_echoing_it(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        _auth(keys=[{"name": "alice", "hash": bad}])
    msg = str(e.value)
    assert "auth.keys.0.hash" in msg and "sluice keys new" in msg
    assert bad not in msg


def test_key_names_are_checked_and_unique() -> None:
    with pytest.raises(ConfigError, match="key name"):
        _auth(keys=[{"name": "a/b", "hash": hash_key("k")}])
    with pytest.raises(ConfigError, match="unique"):
        _auth(keys=[{"name": "a", "hash": hash_key("k1")}, {"name": "a", "hash": hash_key("k2")}])


def test_no_keys_is_an_open_gateway() -> None:
    assert not load_keyring(parse_config({"models": MODELS}).auth, environ={})


def test_keys_from_config_file_and_env_all_verify(tmp_path: Path) -> None:
    k1, k2, k3 = new_key(), new_key(), new_key()
    secret = tmp_path / "keys.yaml"
    secret.write_text(f'- {{name: bob, hash: "{hash_key(k2)}", admin: true}}\n')
    env = {"SLUICE_KEYS": f'[{{name: carol, hash: "{hash_key(k3)}", max_queued_jobs: 5}}]'}
    auth = _auth(
        keys=[{"name": "alice", "hash": hash_key(k1)}],
        keys_file=str(secret),
        keys_env="SLUICE_KEYS",
        default_rate_limit_per_s=2.5,
    )
    ring = load_keyring(auth, environ=env)
    found = {k: ring.verify(k) for k in (k1, k2, k3)}
    assert {k: v.name for k, v in found.items() if v} == {k1: "alice", k2: "bob", k3: "carol"}
    alice, bob = found[k1], found[k2]
    assert bob is not None and bob.admin and alice is not None and not alice.admin
    assert ring.verify(new_key()) is None and ring.verify("") is None
    carol = found[k3]
    assert carol is not None and carol.owner.max_unfinished == 5
    assert carol.owner.rate_per_s == 2.5 and carol.owner.burst == 3  # defaults apply


def test_secret_sources_fail_with_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not set"):
        load_keyring(_auth(keys_env="NOPE"), environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_keyring(_auth(keys_file=str(tmp_path / "missing.yaml")), environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"- name: x\n  hash: {PLAIN}\n")
    with pytest.raises(ConfigError) as e:
        load_keyring(_auth(keys_file=str(bad)), environ={})
    assert "never the key itself" in str(e.value) and PLAIN not in str(e.value)
    broken = tmp_path / "broken.yaml"
    broken.write_text(f'- {{name: x, hash: "{PLAIN}\n')  # unbalanced: a YAML error
    with pytest.raises(ConfigError) as e:
        load_keyring(_auth(keys_file=str(broken)), environ={})
    assert "not valid YAML" in str(e.value) and PLAIN not in str(e.value)
    dup = tmp_path / "dup.yaml"
    dup.write_text(f'- {{name: a, hash: "{hash_key("z")}"}}\n')
    with pytest.raises(ConfigError, match="unique"):
        load_keyring(_auth(keys=[{"name": "a", "hash": hash_key("y")}], keys_file=str(dup)), {})


def test_keys_new_prints_a_key_and_a_line_that_verifies_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sluice", "keys", "new", "dana", "--admin"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    key = re.search(r"\bsk_[A-Za-z0-9_-]{40,}", out)
    line = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("- {"))
    assert key is not None
    [entry] = parse_entries(line, "output")
    assert entry.name == "dana" and entry.admin and entry.hash == hash_key(key.group())
    assert key.group() not in line  # only the hash goes into the config


def test_gateway_refuses_to_start_when_the_keys_env_var_is_missing(tmp_path: Path) -> None:
    cfg = tmp_path / "sluice.yaml"
    cfg.write_text("models: {m: {handler: synthetic}}\nauth: {keys_env: SLUICE_TEST_NO_SUCH}\n")
    r = subprocess.run(
        [sys.executable, "-m", "sluice", "gateway", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "SLUICE_TEST_NO_SUCH is not set" in r.stderr


def test_docs_config_documents_every_auth_field() -> None:
    from sluice.config import ApiKeyConfig

    doc = (Path(__file__).resolve().parents[3] / "docs" / "config.md").read_text()
    fields = [*AuthConfig.model_fields, *ApiKeyConfig.model_fields, "admin_port", "admin_host"]
    missing = [f for f in fields if f"`{f}`" not in doc]
    assert not missing, f"docs/config.md does not document {missing}"

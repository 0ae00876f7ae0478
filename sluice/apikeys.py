"""API keys: generation, hashing, loading from config/secret file/env, lookup.

Keys are random 256-bit tokens, so a plain SHA-256 is enough to store them
(ADR 0060): nothing here ever holds or logs a plaintext key beyond the request
that presents it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from sluice.config import ApiKeyConfig, AuthConfig
from sluice.errors import ConfigError
from sluice.jobs import Owner

KEY_PREFIX = "sk_"
_ENTRIES = TypeAdapter(list[ApiKeyConfig])


def new_key() -> str:
    """A fresh key: 32 random bytes, URL-safe (43 characters after the prefix)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config_line(name: str, key: str, admin: bool = False) -> str:
    """The YAML list entry for ``auth.keys`` (or a keys file) holding ``key``'s hash."""
    extra = ", admin: true" if admin else ""
    return f'- {{name: {name}, hash: "{hash_key(key)}"{extra}}}'


def parse_entries(text: str, source: str) -> list[ApiKeyConfig]:
    """A YAML list of key entries (the shape of ``auth.keys``); empty text is no keys."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # The YAML error quotes the offending line, which may hold a key: never show it.
        raise ConfigError(f"{source}: not valid YAML (line {_line(e)})") from e
    if data is None:
        return []
    try:
        return _ENTRIES.validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{source}: entry {loc}: {msg}") from e


def _line(e: yaml.YAMLError) -> str:
    mark: Any = getattr(e, "problem_mark", None)
    return str(mark.line + 1) if mark is not None else "?"


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    digest: bytes  # raw SHA-256 of the key
    admin: bool
    owner: Owner  # the name with its limits, as the submit script takes them
    # Webhooks (sluice/webhooks): the default URL, the hosts allowed (None: the
    # config's), and the signing secret (None: the config's). Never logged.
    webhook_url: str | None = None
    webhook_allow_hosts: tuple[str, ...] | None = None
    webhook_secret: str | None = field(default=None, repr=False)


class KeyRing:
    """Every configured key; empty means the gateway is open."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self.keys = keys

    def __bool__(self) -> bool:
        return bool(self.keys)

    def verify(self, presented: str) -> ApiKey | None:
        """The key whose hash matches, comparing against every key in constant time."""
        digest = hashlib.sha256(presented.encode()).digest()
        found: ApiKey | None = None
        for k in self.keys:  # no early exit: the time does not depend on which key matched
            if hmac.compare_digest(digest, k.digest):
                found = k
        return found


def _owner(entry: ApiKeyConfig, auth: AuthConfig) -> Owner:
    rate = entry.rate_limit_per_s or auth.default_rate_limit_per_s or 0.0
    burst = entry.burst or auth.default_burst or max(1, int(rate + 0.999))
    cap = entry.max_queued_jobs or auth.default_max_queued_jobs or 0
    return Owner(entry.name, cap, rate, burst if rate else 0, entry.max_priority)


def _refuse_shared_hashes(entries: list[ApiKeyConfig]) -> None:
    """One key, one identity: listed under two names, the last entry would win
    (its admin flag, limits and jobs), silently, by list order."""
    names: dict[str, list[str]] = {}
    for e in entries:
        names.setdefault(e.hash, []).append(e.name)
    shared = sorted(n for n in names.values() if len(n) > 1)
    if shared:  # names only: the hash says nothing useful and need not be printed
        raise ConfigError(f"auth: one key is listed under several names: {shared[0]}")


def load_keyring(auth: AuthConfig, environ: Mapping[str, str] | None = None) -> KeyRing:
    """Keys from the config, then ``keys_file``, then ``keys_env``; names must be unique."""
    env = os.environ if environ is None else environ
    entries = list(auth.keys)
    if auth.keys_file:
        path = Path(auth.keys_file)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"auth.keys_file {path}: cannot read: {e.strerror}") from e
        entries += parse_entries(text, f"auth.keys_file {path}")
    if auth.keys_env:
        if auth.keys_env not in env:
            raise ConfigError(f"auth.keys_env: environment variable {auth.keys_env} is not set")
        entries += parse_entries(env[auth.keys_env], f"environment variable {auth.keys_env}")
    names = [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"auth: key names must be unique, repeated: {dup}")
    _refuse_shared_hashes(entries)
    return KeyRing(
        [
            ApiKey(
                e.name,
                bytes.fromhex(e.hash.removeprefix("sha256:")),
                e.admin,
                _owner(e, auth),
                e.webhook_url,
                tuple(e.webhook_allow_hosts) if e.webhook_allow_hosts is not None else None,
                e.webhook_secret,
            )
            for e in entries
        ]
    )

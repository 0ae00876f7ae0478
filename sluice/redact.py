"""Secrets out of anything printed or logged: URL passwords and API keys."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# scheme://user:password@ (also with an empty user): the password part, up to the
# last '@' before the path: redis-py accepts a raw '@' in a password (it splits at
# the last one), so stopping at the first would print the rest of it.
_USERINFO = re.compile(r"(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^\s/]+)(?P<at>@)")
_API_KEY = re.compile(r"\bsk_[A-Za-z0-9_-]{8,}")
# redis-py also takes the password as a query argument: redis://host/0?password=...
_QUERY_PW = re.compile(r"(?P<pre>[?&](?:sentinel_)?password=)[^&#\s]+", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``redis://:secret@host:6379/0`` -> ``redis://:***@host:6379/0``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a host list (a Sentinel or Cluster URL)
    except ValueError:
        return redact(url)
    if parts.password is None:
        return _QUERY_PW.sub(r"\g<pre>***", url)
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return _QUERY_PW.sub(r"\g<pre>***", urlunsplit(parts._replace(netloc=netloc)))


def redact(text: str) -> str:
    """Every URL password and every Sluice API key (``sk_...``) in free text."""
    text = _QUERY_PW.sub(r"\g<pre>***", _USERINFO.sub(r"\g<pre>***\g<at>", text))
    return _API_KEY.sub("sk_***", text)

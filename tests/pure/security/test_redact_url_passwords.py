"""A Redis URL password is redacted whole from free text, even with an '@'."""

from __future__ import annotations

import pytest
import redis

from sluice.redact import redact, redact_url

# redis-py takes a password with a raw '@' (it splits the URL at the last '@').
URL = "redis://:p@ss-w0rd@127.0.0.1:6379/0"


def test_redis_py_accepts_the_raw_at_sign() -> None:
    assert redis.Redis.from_url(URL).connection_pool.connection_kwargs["password"] == "p@ss-w0rd"


@pytest.mark.parametrize(
    "text",
    [
        f"cannot reach Redis at {URL}: connection refused",
        f"{URL}",
        f"a={URL} b=rediss://user:x@y@z@host:6380/1?ssl_ca_certs=/ca.pem",
    ],
)
def test_no_part_of_the_password_survives(text: str) -> None:
    out = redact(text)
    for secret in ("p@ss", "ss-w0rd", "x@y@z", "y@z"):
        assert secret not in out, out
    assert "127.0.0.1:6379" in out  # still says where


def test_plain_urls_and_encoded_passwords_are_unchanged_or_redacted_as_before() -> None:
    assert redact("redis://127.0.0.1:6379/0 is down") == "redis://127.0.0.1:6379/0 is down"
    assert redact("redis://:s3cret@h:1/0 and sk_abcdefghijkl") == "redis://:***@h:1/0 and sk_***"
    assert redact_url(URL) == "redis://:***@127.0.0.1:6379/0"


def test_a_password_given_as_a_query_argument_is_redacted() -> None:
    # redis-py reads ?password= (and ?username=) from the query as well.
    url = "rediss://h:6380/0?ssl_ca_certs=/ca.pem&password=s3cret&db=0"
    assert redis.Redis.from_url(url).connection_pool.connection_kwargs["password"] == "s3cret"
    for out in (
        redact_url(url),
        redact(f"cannot reach {url}: refused"),
        redact_url("redis://:pw@h:1/0?Password=s3cret"),
    ):
        assert "s3cret" not in out and "password=***" in out.lower(), out
    assert redact_url(url).endswith("ssl_ca_certs=/ca.pem&password=***&db=0")

"""Redis URLs and the config's redis block: parsed into one target, errors that say
what is wrong and never print a password."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config import parse_config, resolve_redis_url
from sluice.connection import as_cluster_url, parse_url, sentinel_url
from sluice.errors import ConfigError
from sluice.redact import redact_url

MODELS = {"m": {"handler": "synthetic"}}


@pytest.mark.parametrize(
    ("url", "kind", "nodes", "extra"),
    [
        ("redis://127.0.0.1:6379/0", "redis", (), {}),
        ("rediss://:pw@h:6380/2", "redis", (), {"tls": True}),
        (
            "redis+sentinel://:pw@a:26379,b:26380/mymaster/3",
            "sentinel",
            (("a", 26379), ("b", 26380)),
            {"service_name": "mymaster", "db": 3, "password": "pw"},
        ),
        # the sentinel port is the default when none is given
        ("redis+sentinel://a,b/svc", "sentinel", (("a", 26379), ("b", 26379)), {"db": 0}),
        (
            "rediss+sentinel://u:p%40ss@a:1/s?sentinel_password=sp&sentinel_tls=true",
            "sentinel",
            (("a", 1),),
            {"username": "u", "password": "p@ss", "tls": True, "sentinel_password": "sp"},
        ),
        ("redis+cluster://a:7000,b:7001", "cluster", (("a", 7000), ("b", 7001)), {}),
        (
            "rediss+cluster://a:7000?ssl_ca_certs=/etc/ca.pem",
            "cluster",
            (("a", 7000),),
            {"tls": True, "tls_files": (("ssl_ca_certs", "/etc/ca.pem"),)},
        ),
        ("rediss+cluster://:pw@[::1]:7000", "cluster", (("::1", 7000),), {"tls": True}),
    ],
)
def test_urls_parse_into_one_target(url: str, kind: str, nodes: tuple, extra: dict) -> None:
    t = parse_url(url)
    assert (t.kind, t.nodes) == (kind, nodes)
    for name, value in extra.items():
        assert getattr(t, name) == value, name


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:1/0", "scheme 'http'"),
        ("h:6379", "scheme '(none)'"),
        ("redis+sentinel://h:26379", "needs the service name"),
        ("redis+sentinel://h:26379/svc/x", "/service_name[/db]"),
        ("redis+sentinel://h:notaport/svc", "bad host:port 'h:notaport'"),
        ("redis+cluster://h:99999", "bad host:port"),
        ("redis+cluster://h:7000/3", "only database 0"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        parse_url(url)
    assert says in str(e.value)


def test_a_bad_url_in_the_config_file_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"models": MODELS, "redis_url": "http://:s3cret@h:1/0"})
    assert "scheme 'http'" in str(e.value) and "s3cret" not in str(e.value)


names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)


@given(
    service=names,
    password=st.none() | names,
    sentinel_password=st.none() | names,
    db=st.integers(0, 15),
    hosts=st.lists(st.integers(1, 65535), min_size=1, max_size=3),
)
def test_the_sentinel_block_round_trips_through_its_url(
    service: str, password: str | None, sentinel_password: str | None, db: int, hosts: list[int]
) -> None:
    addrs = [f"10.0.0.{i}:{p}" for i, p in enumerate(hosts)]
    url = sentinel_url(
        addrs, service, password=password, db=db, sentinel_password=sentinel_password
    )
    t = parse_url(url)
    assert t.kind == "sentinel" and t.service_name == service and t.db == db
    assert t.password == password and t.sentinel_password == sentinel_password
    assert [f"{h}:{p}" for h, p in t.nodes] == addrs
    for secret in (password, sentinel_password):
        if secret and len(secret) > 3:
            assert f":{secret}@" not in redact_url(url) and f"={secret}" not in redact_url(url)


def test_the_config_block_compiles_to_the_url_every_process_uses() -> None:
    cfg = parse_config(
        {
            "models": MODELS,
            "redis": {"sentinel": {"addresses": ["s1:26379", "s2:26379"], "service_name": "q"}},
        }
    )
    assert resolve_redis_url(None, cfg) == "redis+sentinel://s1:26379,s2:26379/q/0"
    # --redis-url (or SLUICE_REDIS_URL) still wins
    assert resolve_redis_url("redis://x:1/0", cfg) == "redis://x:1/0"
    cluster = parse_config(
        {"models": MODELS, "redis_url": "redis://n1:7000/0", "redis": {"cluster": True}}
    )
    assert resolve_redis_url(None, cluster) == "redis+cluster://n1:7000"
    assert as_cluster_url("rediss://:pw@n1:7000") == "rediss+cluster://:pw@n1:7000"


@pytest.mark.parametrize(
    ("redis_block", "url", "says"),
    [
        (
            {"sentinel": {"addresses": ["s:1"], "service_name": "q"}},
            "redis://h:1/0",
            "drop redis_url",
        ),
        ({"cluster": True}, None, "redis.cluster needs redis_url"),
        ({"sentinel": {"addresses": [], "service_name": "q"}}, None, "redis.sentinel.addresses"),
    ],
)
def test_contradictory_redis_settings_are_refused(
    redis_block: dict, url: str | None, says: str
) -> None:
    data: dict = {"models": MODELS, "redis": redis_block}
    if url:
        data["redis_url"] = url
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert says in str(e.value)

"""The console's mode decision, its Host/Origin rules and its sessions' expiry (client/dashboard/access.py,
guard.py, sessions.py), without a cluster."""

from __future__ import annotations

import asyncio
import time

import pytest

from client.dashboard.access import AccessError, decide
from client.dashboard.cli import exposure_warnings
from client.dashboard.guard import Served, split_host
from client.dashboard.sessions import SessionStore, TooManySessions
from client.dashboard.watcher import ClusterWatcher

SASL = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}
SERVICE = {**SASL, "sasl_username": "admin", "sasl_password": "pw"}


def test_modes():
    login = decide(SASL, False, (), False)
    assert (login.mode, login.login_required, login.writes, login.acts_as_user) == ("login", True, True, True)
    assert decide(SASL, True, ("alice",), False).allow_users == {"alice"}
    allow = decide(SERVICE, False, ("alice", "bob"), False)
    assert (allow.mode, allow.login_required, allow.writes, allow.acts_as_user) == ("service", True, True, False)
    ro = decide(SERVICE, True, (), False)
    assert (ro.login_required, ro.writes, ro.service_identity) == (False, False, "User:admin")
    mtls = {"security_protocol": "SSL", "ssl_certificate_location": "/c.pem", "ssl_key_location": "/k.pem"}
    assert decide(mtls, True, (), False).mode == "service"
    opened = decide({}, False, (), False)
    assert (opened.mode, opened.login_required, opened.writes) == ("open", False, False)
    assert "--allow-writes" in opened.why_read_only
    assert decide({"security_protocol": "SSL"}, False, (), True).writes  # TLS without a client certificate: open


@pytest.mark.parametrize(
    "config, read_only, users, writes, words",
    [
        (SERVICE, False, (), False, ("User:admin", "--read-only", "--allow-user")),
        ({"security_protocol": "SSL", "ssl_certificate_location": "/c.pem"}, False, (), False, ("--read-only",)),
        (SERVICE, False, ("alice",), True, ("--allow-writes",)),
        (SASL, False, (), True, ("--allow-writes",)),
        ({}, False, ("alice",), False, ("SASL",)),
        ({}, True, (), True, ("contradict",)),
    ],
)
def test_unsafe_combinations_are_refused_in_one_line(config, read_only, users, writes, words):
    with pytest.raises(AccessError) as e:
        decide(config, read_only, users, writes)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_host_and_origin_rules():
    served = Served.of("127.0.0.1", False, None)
    for ok in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "LOCALHOST", "127.0.0.1"):
        assert served.host_ok(ok), ok
    for bad in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", "", None, "a@127.0.0.1", "x/y"):
        assert not served.host_ok(bad), bad
    assert served.origin_ok("http://127.0.0.1:8080", "127.0.0.1:8080")
    for bad in ("http://evil.example", "null", None, "https://127.0.0.1:8080", "http://127.0.0.1:8081"):
        assert not served.origin_ok(bad, "127.0.0.1:8080"), bad
    behind = Served.of("0.0.0.0", False, "https://console.example.com/")
    assert behind.host_ok("console.example.com") and not behind.host_ok("0.0.0.0:8080")
    assert behind.origin_ok("https://console.example.com", "console.example.com")
    assert behind.origin_ok("https://console.example.com:443", "127.0.0.1:8080")
    assert behind.secure_cookies and behind.cookie_name == "__Host-kl_session"
    assert not served.secure_cookies and served.cookie_name == "kl_session"
    assert Served.of("127.0.0.1", True, None).origin_ok("https://localhost:9443", "localhost:9443")
    with pytest.raises(ValueError):
        Served.of("127.0.0.1", False, "ftp://x")
    assert split_host("[::1]:80") == ("::1", 80)


def test_exposure_warnings():
    opened, login = decide({}, False, (), False), decide(SASL, False, (), False)
    assert "no login" in exposure_warnings(opened, False, "0.0.0.0", 8080)[0]
    assert "plain http" in exposure_warnings(login, False, "0.0.0.0", 8080)[0]
    assert exposure_warnings(login, True, "0.0.0.0", 8080) == []


def test_sessions_expire_when_idle_and_are_bounded():
    async def run() -> None:
        store = SessionStore(timeout_s=0.3, max_sessions=2)
        w = ClusterWatcher("127.0.0.1:1")
        a = store.add("alice", w, {}, owns_watcher=False)
        assert store.get(a.token) is a and store.get("nope") is None
        store.add("bob", w, {}, owns_watcher=False)
        with pytest.raises(TooManySessions):
            store.add("carol", w, {}, owns_watcher=False)
        for _ in range(3):  # touched: still alive past one timeout
            time.sleep(0.15)
            assert store.get(a.token) is a
        time.sleep(0.35)
        assert store.get(a.token) is None and a.closed
        store.expire()  # bob's too, untouched all along
        assert len(store) == 0
        # The CSRF token belongs to its cookie only.
        assert store.csrf_ok("c1", store.csrf_for("c1")) and not store.csrf_ok("c2", store.csrf_for("c1"))
        assert not store.csrf_ok(None, store.csrf_for("")) and not store.csrf_ok("c1", None)
        await w.stop()

    asyncio.run(run())

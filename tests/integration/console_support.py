"""What the console's tests share: a kl-dashboard process, headless Chromium (Debian's chromium +
chromium-driver through Selenium), and plain-HTTP requests the way a browser page of the console makes them
(session cookie, X-CSRF-Token, same Origin, JSON body) or an attacker does (any of those missing)."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.cluster_harness import HOST, ROOT, free_ports, wait_until

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CONSOLE_INFO = re.compile(r'<script id="kl-console" type="application/json">(.*?)</script>', re.S)


def chrome(tmp: Path, *extra_flags: str):  # type: ignore[no-untyped-def]
    """Headless Chromium; `extra_flags` e.g. --host-resolver-rules to point a name at loopback (DNS rebinding)."""
    from selenium import webdriver

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are required: apt-get install -y chromium chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # Without the background-networking flags Chromium waits on network services this closed network lacks.
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp}",
        *extra_flags,
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)

    def cookie(self, name: str) -> str | None:
        """The Set-Cookie header of `name`, attributes included."""
        return next((c for c in self.headers.get_all("Set-Cookie") or [] if c.startswith(name + "=")), None)


class Console:
    """A kl-dashboard process on a free loopback port; `ready` waits for its first answer (a snapshot where
    no login is needed, the login page otherwise)."""

    def __init__(self, bootstrap: str, root: Path, *args: str, tls_ca: Path | None = None, login: bool = False) -> None:
        self.port = free_ports(1)[0]
        self.tls_ca = tls_ca
        self.scheme = "https" if tls_ca else "http"
        self.url = f"{self.scheme}://{HOST}:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / f"dashboard-{self.port}.log"
        self.out_path = root / f"dashboard-{self.port}.out"
        self.log = open(self.log_path, "wb")
        self.out = open(self.out_path, "wb")
        cmd = [sys.executable, "-m", "client.dashboard", "--bootstrap-server", bootstrap, "--http-port", str(self.port)]
        self.proc = subprocess.Popen(
            [*cmd, *args], cwd=ROOT, stdout=self.out, stderr=self.log, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
        wait_until(self._login_page if login else self._ready, 30, "the console to answer")

    @classmethod
    def attach(cls, port: int) -> "Console":
        """A console another program started (kl-cluster up --dashboard), on plain http: requests only."""
        console = cls.__new__(cls)
        console.port, console.tls_ca, console.scheme = port, None, "http"
        console.url = f"http://{HOST}:{port}"
        return console

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text()
        return b'"ready":true' in self.request("GET", "/api/snapshot").body

    def _login_page(self) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text()
        return self.request("GET", "/login").status == 200

    def request(
        self, method: str, path: str, body: bytes | dict | None = None, headers: dict[str, str] | None = None
    ) -> Reply:
        """One request exactly as given: no cookie, Origin or CSRF token unless in `headers`."""
        if self.tls_ca is not None:
            ctx = ssl.create_default_context(cafile=str(self.tls_ca))
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(HOST, self.port, timeout=15, context=ctx)
        else:
            conn = http.client.HTTPConnection(HOST, self.port, timeout=15)
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        try:
            conn.request(method, path, body=data, headers=headers or {})
            r = conn.getresponse()
            return Reply(r.status, r.headers, r.read())
        finally:
            conn.close()

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.out.close()


class Browser:
    """What the console's own page sends: its session cookie, its CSRF token, its Origin, JSON bodies."""

    def __init__(self, console: Console, cookie: str) -> None:
        self.console = console
        self.cookie = cookie  # "name=value"
        page = console.request("GET", "/cluster", headers={"Cookie": cookie})
        assert page.status == 200, page.body[:300]
        info = CONSOLE_INFO.search(page.body.decode())
        assert info is not None
        self.csrf = json.loads(info[1])["csrf"]

    @classmethod
    def anonymous(cls, console: Console) -> "Browser":
        """A console without login: the page hands out a cookie and the token that goes with it."""
        page = console.request("GET", "/cluster")
        set_cookie = page.headers.get("Set-Cookie")
        assert page.status == 200 and set_cookie, (page.status, set_cookie)
        return cls(console, set_cookie.split(";")[0])

    @classmethod
    def login(cls, console: Console, user: str, password: str) -> "Browser":
        r = console.request(
            "POST", "/api/login", {"user": user, "password": password}, same_origin(console, json_body=True)
        )
        assert r.status == 200, (r.status, r.body)
        set_cookie = r.headers.get("Set-Cookie")
        assert set_cookie
        return cls(console, set_cookie.split(";")[0])

    def headers(self, **extra: str) -> dict[str, str]:
        return {
            "Cookie": self.cookie,
            "X-CSRF-Token": self.csrf,
            **same_origin(self.console, json_body=True),
            **extra,
        }

    def get(self, path: str) -> Reply:
        return self.console.request("GET", path, headers={"Cookie": self.cookie})

    def send(self, method: str, path: str, body: dict | None = None) -> Reply:
        return self.console.request(method, path, body if body is not None else {}, self.headers())


def same_origin(console: Console, json_body: bool = False) -> dict[str, str]:
    return {"Origin": console.url, **({"Content-Type": "application/json"} if json_body else {})}


def wait_ready(console: Console, browser: Browser, timeout: float = 30) -> dict:
    """The session's first snapshot (login mode: its own watcher polls from the login on)."""

    def ready() -> dict | None:
        snap = browser.get("/api/snapshot").json()
        return snap if snap.get("ready") else None

    return wait_until(ready, timeout, "the session's first snapshot")  # type: ignore[return-value]

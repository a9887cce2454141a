"""The console as an attacker meets it (issue 25 §1): kl-dashboard in front of a SASL_SSL broker with the ACL
authorizer, and in front of an open one. Each test does the attack and fails if it works: anonymous reads and
changes, a cross-origin text/plain POST, a change without the CSRF token, a foreign Host header (DNS
rebinding), a wrong password, a service identity lent to anyone; and in Chromium, alice and admin logging in
to the same console see different topic lists, and a page on another origin cannot change anything.

One broker per cluster, one cluster per kind for the module: the console's checks do not depend on the
cluster's size, and the test stays quick."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from client.dashboard.context import LOGIN_FAILED
from client.sync import Producer
from net.acl import AclOperation, ResourceType
from tests.integration.cluster_harness import HOST, ROOT, ClusterHarness, free_ports, wait_until
from tests.integration.console_support import Browser, Console, chrome, same_origin, wait_ready
from tests.integration.test_security import MECH, add_user, certs, grant, ours, sasl_ssl_cluster

selenium = pytest.importorskip("selenium", reason="pip install -e '.[test]' (selenium)")
from selenium.webdriver.common.by import By  # noqa: E402

__all__ = ["certs"]  # the module-scoped CA and broker certificate of test_security, a fixture here too

ALICE, SECRET = "alice-topic", "secret-topic"


# --- a SASL_SSL broker with ACLs, and its consoles -------------------------------------------------------


@pytest.fixture(scope="module")
def secure(tmp_path_factory, certs):
    """admin (super user), alice (DESCRIBE/READ/WRITE on alice-topic only), bob (no ACLs); a record in each topic."""
    h = sasl_ssl_cluster(tmp_path_factory.mktemp("console-secure"), 1, certs)
    try:
        h.start()
        add_user(h, "alice", "alice-secret")
        add_user(h, "bob", "bob-secret")
        h.create_topic(ALICE, 1, rf=1)
        h.create_topic(SECRET, 1, rf=1)
        for op in (AclOperation.READ, AclOperation.WRITE):
            grant(h, "User:alice", op, ResourceType.TOPIC, ALICE)
        with Producer(h.bootstrap(), acks="all", **ours("admin", "admin-secret", certs)) as p:
            p.send(SECRET, b"the secret record")
            p.send(ALICE, b"alice's record")
            p.flush(20)
        yield h
    finally:
        h.cleanup()


def properties(path: Path, certs: Path, user: str | None = None, password: str | None = None) -> Path:
    lines = ["security.protocol=SASL_SSL", f"sasl.mechanism={MECH}", f"ssl.ca.location={certs / 'ca.pem'}"]
    if user:
        lines += [f"sasl.username={user}", f"sasl.password={password}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def login_console(secure, certs, tmp_path_factory):
    """Login mode: no credentials in the command config, every user logs in as themselves."""
    root = tmp_path_factory.mktemp("console-login")
    c = Console(secure.bootstrap(), root, "--command-config", str(properties(root / "c.properties", certs)), login=True)
    yield c
    c.close()


def topics_of(h: ClusterHarness) -> set[str]:
    with h.admin() as a:
        return set(a.list_topics())


def names(reply) -> list[str]:  # type: ignore[no-untyped-def]
    assert reply.status == 200, (reply.status, reply.body)
    return sorted(t["name"] for t in reply.json())


# --- start-up: what each mode refuses ---------------------------------------------------------------------


def kl_dashboard(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "client.dashboard", "--bootstrap-server", f"{HOST}:1", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_refused(cp: subprocess.CompletedProcess, *words: str) -> None:
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode != 0 and len(lines) == 1 and "Traceback" not in cp.stderr, cp.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_a_service_identity_is_refused_without_read_only_or_an_allow_list(tmp_path, certs):
    admin = properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    assert_refused(kl_dashboard("--command-config", str(admin)), "User:admin", "--read-only", "--allow-user")
    # An open cluster has no passwords to check an allow-list against (the other refused combinations:
    # tests/unit/test_dashboard_access.py).
    assert_refused(kl_dashboard("--allow-user", "alice"), "SASL")


# --- login mode over plain HTTP ---------------------------------------------------------------------------


def test_anonymous_requests_get_401_and_change_nothing(secure, login_console):
    before = topics_of(secure)
    assert {ALICE, SECRET} <= before
    c = login_console
    for path in (
        "/api/topics",
        f"/api/messages?topic={SECRET}&partition=0&mode=beginning",
        "/api/snapshot",
        "/api/events",
        "/api/history",
        f"/api/topics/{SECRET}/configs",
    ):
        r = c.request("GET", path)
        assert r.status == 401 and b"secret record" not in r.body and SECRET.encode() not in r.body, (path, r)
    # Well-formed changes (same origin, JSON) without a session.
    assert c.request("POST", "/api/topics", {"name": "anon-topic"}, same_origin(c, True)).status == 401
    assert c.request("DELETE", f"/api/topics/{ALICE}", {}, same_origin(c, True)).status == 401
    assert c.request("POST", "/api/topics", b'{"name": "anon-plain"}', {"Content-Type": "text/plain"}).status == 401
    # A page is the login page instead.
    r = c.request("GET", "/topics?x=1")
    where = urlsplit(r.headers["Location"])
    assert r.status == 303 and where.path == "/login" and parse_qs(where.query) == {"next": ["/topics?x=1"]}
    time.sleep(0.5)  # a change sent to a controller would be visible by now
    assert topics_of(secure) == before


def test_a_wrong_password_and_an_unknown_user_get_the_same_one_line(login_console):
    c = login_console
    wrong = c.request("POST", "/api/login", {"user": "alice", "password": "nope"}, same_origin(c, True))
    unknown = c.request("POST", "/api/login", {"user": "mallory", "password": "nope"}, same_origin(c, True))
    for r in (wrong, unknown):
        assert r.status == 401 and r.json() == {"error": LOGIN_FAILED}
        assert r.headers.get("Set-Cookie") is None
    assert c.request("POST", "/api/login", {"user": "alice"}, same_origin(c, True)).status == 400
    # A login from another origin, or as a form, is no login.
    evil = {"Origin": "http://evil.example", "Content-Type": "application/json"}
    assert c.request("POST", "/api/login", {"user": "alice", "password": "alice-secret"}, evil).status == 403
    form = {"Origin": c.url, "Content-Type": "application/x-www-form-urlencoded"}
    assert c.request("POST", "/api/login", b"user=alice&password=alice-secret", form).status == 415


def test_each_user_sees_and_does_what_the_acls_allow(secure, login_console):
    c = login_console
    alice, admin = Browser.login(c, "alice", "alice-secret"), Browser.login(c, "admin", "admin-secret")
    wait_ready(c, alice)
    wait_ready(c, admin)
    assert names(alice.get("/api/topics")) == [ALICE]
    assert {ALICE, SECRET} <= set(names(admin.get("/api/topics")))
    # Records: alice reads hers, not the secret ones; admin reads both.
    mine = alice.get(f"/api/messages?topic={ALICE}&mode=beginning")
    assert [r["value"]["text"] for r in mine.json()["records"]] == ["alice's record"]
    denied = alice.get(f"/api/messages?topic={SECRET}&partition=0&mode=beginning")
    assert denied.status == 400 and b"secret record" not in denied.body, denied.body
    got = admin.get(f"/api/messages?topic={SECRET}&partition=0&mode=beginning").json()["records"]
    assert [r["value"]["text"] for r in got] == ["the secret record"]
    # Nothing of the secret topic in alice's live view: not its name, not its traffic (the brokers' /metrics
    # name every topic; the console keeps to what her Metadata shows).
    metrics = secure[1].metrics()
    if f'topic="{SECRET}"' in metrics:
        wait_until(lambda: SECRET in admin.get("/api/snapshot").json()["point"]["topics"], 15, "admin's rates")
    for _ in range(3):
        assert SECRET.encode() not in alice.get("/api/snapshot").body
        time.sleep(0.5)
    # alice's changes are the broker's to refuse, and it does.
    r = alice.send("POST", "/api/topics", {"name": "alice-made", "partitions": 1, "replication_factor": 1})
    assert r.status == 400 and "alice-made" in r.json()["error"], r.body
    r = alice.send("DELETE", f"/api/topics/{SECRET}")
    assert r.status == 400, r.body
    assert "alice-made" not in topics_of(secure) and SECRET in topics_of(secure)
    # admin may: the same console creates and deletes for admin.
    made = admin.send("POST", "/api/topics", {"name": "admin-made", "partitions": 1, "replication_factor": 1})
    assert made.status == 200, made.body
    assert "admin-made" in topics_of(secure)
    assert admin.send("DELETE", "/api/topics/admin-made").status == 200
    wait_until(lambda: "admin-made" not in topics_of(secure), 15, "admin-made deleted")
    for b in (alice, admin):  # their clients stop polling
        assert b.send("POST", "/api/logout").status == 200


def test_csrf_origin_content_type_and_host_checks_hold_even_with_a_session(secure, login_console):
    """With admin's own session cookie, every forged variant of a change is refused and changes nothing."""
    c = login_console
    admin, other = Browser.login(c, "admin", "admin-secret"), Browser.login(c, "alice", "alice-secret")
    body = b'{"name": "evil-topic", "partitions": 1, "replication_factor": 1}'
    cookie = {"Cookie": admin.cookie}
    attempts = {
        # What any web page can send without a preflight: a text/plain POST from its own origin.
        "cross-origin text/plain": (403, {**cookie, "Origin": "http://evil.example", "Content-Type": "text/plain"}),
        "cross-origin JSON with the token": (403, {**admin.headers(), "Origin": "http://evil.example"}),
        "no Origin": (403, {k: v for k, v in admin.headers().items() if k != "Origin"}),
        "same origin text/plain with the token": (415, admin.headers(**{"Content-Type": "text/plain"})),
        "no CSRF token": (403, {k: v for k, v in admin.headers().items() if k != "X-CSRF-Token"}),
        "another session's token": (403, admin.headers(**{"X-CSRF-Token": other.csrf})),
        "DNS rebinding (Host: evil.example)": (421, admin.headers(Host="evil.example")),
    }
    for what, (status, headers) in attempts.items():
        r = c.request("POST", "/api/topics", body, headers)
        assert r.status == status, (what, r.status, r.body)
        r = c.request("DELETE", f"/api/topics/{ALICE}", b"{}", headers)
        assert r.status == status, (what, r.status, r.body)
    r = c.request("GET", "/api/topics", headers={**cookie, "Host": "evil.example"})
    assert r.status in (403, 421) and ALICE.encode() not in r.body
    time.sleep(0.5)
    assert "evil-topic" not in topics_of(secure) and ALICE in topics_of(secure)
    for b in (admin, other):
        assert b.send("POST", "/api/logout").status == 200


def test_security_headers_and_cookie_flags(login_console):
    c = login_console
    r = c.request("POST", "/api/login", {"user": "alice", "password": "alice-secret"}, same_origin(c, True))
    cookie = r.cookie("kl_session")
    assert cookie is not None
    flags = [f.strip().lower() for f in cookie.split(";")[1:]]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags
    assert "secure" not in flags  # plain http here: the TLS test checks Secure
    session = {"Cookie": cookie.split(";")[0]}
    answers = [
        c.request("GET", "/login"),
        c.request("GET", "/cluster", headers=session),
        c.request("GET", "/api/topics", headers=session),
        c.request("GET", "/api/topics"),  # a 401
        c.request("GET", "/static/app.js"),
        c.request("GET", "/api/topics", headers={"Host": "evil.example"}),  # a 421
    ]
    for a in answers:
        csp = a.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert a.headers["X-Frame-Options"] == "DENY"
        assert a.headers["X-Content-Type-Options"] == "nosniff"
        assert a.headers["Referrer-Policy"] == "no-referrer"
    # The page has no inline script: its only <script> elements without src are inert JSON.
    page = answers[1].body.decode()
    for tag in re.findall(r"<script[^>]*>", page):
        assert "src=" in tag or 'type="application/json"' in tag, tag


def test_logout_ends_the_session_and_needs_the_token(login_console):
    c = login_console
    alice = Browser.login(c, "alice", "alice-secret")
    assert alice.get("/api/topics").status == 200
    forged = c.request("POST", "/api/logout", {}, {"Cookie": alice.cookie, **same_origin(c, True)})
    assert forged.status == 403 and alice.get("/api/topics").status == 200
    assert alice.send("POST", "/api/logout").status == 200
    assert alice.get("/api/topics").status == 401


# --- service identity consoles ----------------------------------------------------------------------------


def test_an_allow_list_lets_only_its_users_in_and_sessions_expire(secure, certs, tmp_path):
    admin = properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    c = Console(
        secure.bootstrap(), tmp_path, "--command-config", str(admin), "--allow-user", "alice",
        "--session-timeout", "3", login=True,
    )  # fmt: skip
    try:
        for user, password in (("bob", "bob-secret"), ("alice", "wrong"), ("mallory", "x")):
            r = c.request("POST", "/api/login", {"user": user, "password": password}, same_origin(c, True))
            assert r.status == 401 and r.json() == {"error": LOGIN_FAILED}, (user, r.body)
        alice = Browser.login(c, "alice", "alice-secret")
        # The service identity acts for her: admin's view.
        wait_until(lambda: SECRET in names(alice.get("/api/topics")), 15, "the service identity's topics")
        assert c.request("GET", "/api/topics").status == 401
        time.sleep(3.5)  # idle past --session-timeout
        assert alice.get("/api/topics").status == 401
    finally:
        c.close()
    assert "console mode: service identity User:admin (users alice log in" in c.log_path.read_text()


def test_a_read_only_service_console_changes_nothing(secure, certs, tmp_path):
    admin = properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    c = Console(secure.bootstrap(), tmp_path, "--command-config", str(admin), "--read-only")
    try:
        anyone = Browser.anonymous(c)
        assert SECRET in names(anyone.get("/api/topics"))  # what this mode exposes, as documented
        r = anyone.send("POST", "/api/topics", {"name": "ro-made"})
        assert r.status == 403 and "read-only" in r.json()["error"]
        assert anyone.send("DELETE", f"/api/topics/{SECRET}").status == 403
    finally:
        c.close()
    assert "ro-made" not in topics_of(secure) and SECRET in topics_of(secure)


# --- in Chromium ------------------------------------------------------------------------------------------


class EvilSite:
    """A page on another origin (another port of 127.0.0.1: the same *site*, so SameSite alone would let the
    cookie go) that tries what any web page can: a text/plain form POST, no-cors fetches, a DELETE."""

    def __init__(self, target: str) -> None:
        page = f"""<!doctype html><html><body>
<form id="f" method="POST" action="{target}/api/topics" enctype="text/plain">
<input name='{{"name": "evil-form", "x": "' value='"}}'></form>
<script>
Promise.allSettled([
  fetch("{target}/api/topics", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"Content-Type": "text/plain"}}, body: '{{"name": "evil-fetch", "partitions": 1}}'}}),
  fetch("{target}/api/topics/{ALICE}", {{method: "DELETE", credentials: "include",
    headers: {{"Content-Type": "application/json"}}}}),
]).then(() => document.getElementById("f").submit());
</script></body></html>""".encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, free_ports(1)[0]), Handler)
        self.url = f"http://{HOST}:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def csp_or_script_errors(driver) -> list[str]:  # type: ignore[no-untyped-def]
    """Refused requests log too (a 401 is expected here); a CSP violation or an uncaught error must not."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if "Content Security Policy" in e["message"] or "Uncaught" in e["message"]
    ]


def test_in_chromium_alice_and_admin_see_different_topics_and_another_origin_changes_nothing(
    secure, login_console, tmp_path
):
    c = login_console
    # evil.example resolves to 127.0.0.1 in this browser, as a DNS-rebinding attacker's name would.
    driver = chrome(tmp_path / "chrome", "--host-resolver-rules=MAP evil.example 127.0.0.1")
    evil = EvilSite(c.url)
    try:

        def login(user: str, password: str) -> None:
            driver.find_element(By.ID, "user").clear()
            driver.find_element(By.ID, "user").send_keys(user)
            driver.find_element(By.ID, "password").send_keys(password)
            driver.find_element(By.ID, "submit").click()

        def topic_rows() -> list[str]:
            return driver.execute_script(
                "return Array.from(document.querySelectorAll('#topics tr[data-topic]')).map((r) => r.dataset.topic)"
            )

        def error_line() -> str:
            return driver.find_element(By.ID, "login-error").text

        driver.get(c.url + "/topics")
        wait_until(lambda: driver.find_elements(By.ID, "login"), 10, "the login page")
        assert driver.current_url == f"{c.url}/login?next=/topics"
        # A wrong password, then an unknown user: the same one line, still on the login page.
        for user, password in (("alice", "wrong-password"), ("mallory", "whatever")):
            login(user, password)
            wait_until(lambda: error_line() == LOGIN_FAILED, 15, f"the refusal of {user}")
            assert "\n" not in error_line() and "/login" in driver.current_url
        login("alice", "alice-secret")
        wait_until(lambda: topic_rows() == [ALICE], 20, "alice's topic list")
        assert driver.current_url == f"{c.url}/topics"
        assert driver.find_element(By.ID, "user-name").text == "alice"
        time.sleep(1.5)  # live updates keep to her topics
        assert topic_rows() == [ALICE]
        # Her create is the broker's to refuse: one line on the page, nothing made.
        driver.find_element(By.CSS_SELECTOR, "#create-topic input[name=name]").send_keys("alice-new")
        driver.find_element(By.CSS_SELECTOR, "#create-topic button").click()
        wait_until(
            lambda: any("create alice-new" in e for e in driver.execute_script(
                "return Array.from(document.querySelectorAll('#errors div')).map((e) => e.innerText)")),
            15, "alice's create refused",
        )  # fmt: skip
        assert "alice-new" not in topics_of(secure)
        driver.find_element(By.ID, "logout").click()
        wait_until(lambda: driver.find_elements(By.ID, "login"), 10, "the login page after logout")
        driver.get(c.url + "/topics")
        wait_until(lambda: driver.find_elements(By.ID, "login"), 10, "the session gone")
        login("admin", "admin-secret")
        wait_until(lambda: {ALICE, SECRET} <= set(topic_rows()), 20, "admin's topic list")
        assert driver.find_element(By.ID, "user-name").text == "admin"
        # admin logged in: a page on another origin tries its changes with admin's cookie in the browser.
        driver.execute_script("window.open(arguments[0], 'evil')", evil.url)
        driver.switch_to.window(driver.window_handles[-1])
        # The fetches settled, then the form posted: the tab shows the console's answer to it.
        wait_until(lambda: driver.current_url == f"{c.url}/api/topics", 15, "the other origin's form sent")
        assert "cross-origin request refused" in driver.find_element(By.TAG_NAME, "body").text
        assert "evil-" not in " ".join(topics_of(secure)) and ALICE in topics_of(secure)
        # DNS rebinding: a page of evil.example, now resolving to the console's address, reads nothing.
        driver.get(f"http://evil.example:{c.port}/api/topics")
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "does not serve the host" in body and ALICE not in body, body
        driver.switch_to.window(driver.window_handles[0])
        driver.get(c.url + "/topics")
        wait_until(lambda: {ALICE, SECRET} <= set(topic_rows()), 10, "admin's session intact")
        assert csp_or_script_errors(driver) == []
    finally:
        evil.close()
        driver.quit()


# --- an open cluster --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory):
    h = ClusterHarness(tmp_path_factory.mktemp("console-open"), 1)
    try:
        h.start()
        h.create_topic("kept", 1, rf=1)
        yield h
    finally:
        h.cleanup()


def test_an_open_cluster_console_is_read_only_unless_allow_writes(open_cluster, tmp_path):
    ro = Console(open_cluster.bootstrap(), tmp_path / "ro")
    rw = Console(open_cluster.bootstrap(), tmp_path / "rw", "--allow-writes")
    try:
        reader = Browser.anonymous(ro)
        wait_until(lambda: "kept" in names(reader.get("/api/topics")), 10, "kept listed")
        r = reader.send("POST", "/api/topics", {"name": "ro-made", "partitions": 1, "replication_factor": 1})
        assert r.status == 403 and "--allow-writes" in r.json()["error"]
        assert reader.send("DELETE", "/api/topics/kept").status == 403
        writer = Browser.anonymous(rw)
        plain = {"Cookie": writer.cookie, "Origin": "http://evil.example", "Content-Type": "text/plain"}
        assert rw.request("POST", "/api/topics", b'{"name": "evil-made"}', plain).status == 403
        no_token = {k: v for k, v in writer.headers().items() if k != "X-CSRF-Token"}
        assert rw.request("POST", "/api/topics", b'{"name": "evil-made"}', no_token).status == 403
        assert rw.request("GET", "/api/topics", headers={"Host": "evil.example"}).status == 421
        r = writer.send("POST", "/api/topics", {"name": "rw-made", "partitions": 1, "replication_factor": 1})
        assert r.status == 200, r.body
    finally:
        ro.close()
        rw.close()
    assert topics_of(open_cluster) >= {"kept", "rw-made"}
    assert not topics_of(open_cluster) & {"ro-made", "evil-made"}
    assert "read-only" in ro.log_path.read_text() and "read-write" in rw.log_path.read_text()


def test_a_console_bound_beyond_loopback_on_an_open_cluster_warns(open_cluster):
    # The port is held (bound, never listening) so the console stops right after its start-up lines: nothing
    # here ever listens beyond loopback.
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        port = held.getsockname()[1]
        cp = kl_dashboard("--http-host", "0.0.0.0", "--http-port", str(port))
    warnings = [line for line in cp.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "no login" in warnings[0] and "0.0.0.0" in warnings[0], cp.stderr
    assert cp.returncode != 0 and "cannot listen" in cp.stderr


def test_the_console_over_tls_serves_https_with_a_secure_cookie(open_cluster, certs, tmp_path):
    c = Console(
        open_cluster.bootstrap(), tmp_path, "--allow-writes", "--http-cert", str(certs / "broker.pem"),
        tls_ca=certs / "ca.pem",
    )  # fmt: skip
    try:
        assert c.out_path.read_text() == f"Kafka Lite console: https://{HOST}:{c.port}/cluster\n"
        page = c.request("GET", "/cluster")
        cookie = page.cookie("__Host-kl_session")
        assert page.status == 200 and cookie is not None
        flags = [f.strip().lower() for f in cookie.split(";")[1:]]
        assert {"secure", "httponly", "samesite=strict", "path=/"} <= set(flags)
        writer = Browser.anonymous(c)
        assert writer.send("POST", "/api/topics", {"name": "tls-made", "partitions": 1}).status == 200
        # Plain http to the https port gets no page.
        with socket.create_connection((HOST, c.port), timeout=5) as s:
            s.sendall(b"GET /cluster HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.settimeout(5)
            try:
                answer = s.recv(4096)
            except (TimeoutError, ConnectionResetError):
                answer = b""
        assert b"kl-snapshot" not in answer and not answer.startswith(b"HTTP/1.1 200")
    finally:
        c.close()
    assert "tls-made" in topics_of(open_cluster)

"""kl-dashboard in a real browser (Debian's chromium + chromium-driver, Selenium, headless) against one
3-broker cluster shared by the module: every page loads without JavaScript errors, the pages agree with
kl-topics / kl-groups, the messages page shows fresh records, and a SIGKILLed broker shows as down with
its partitions' new leaders and the election in the timeline, then returns to the ISRs.

Screenshots of the failover and of the group page go to the test's tmp dir, and to KL_SCREENSHOTS_DIR
when set (`KL_SCREENSHOTS_DIR=docs/images pytest tests/integration/test_dashboard.py` refreshes the README's images).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from client.admin import NewTopic
from client.sync import Producer
from tests.integration.cluster_harness import HOST, ROOT, ClusterHarness, free_ports, wait_until
from tests.integration.console_support import Browser, Console, chrome

selenium = pytest.importorskip("selenium", reason="pip install -e '.[test]' (selenium)")
from selenium.webdriver.common.by import By  # noqa: E402

TOPIC = "orders"
GROUP = "billing"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    cluster = ClusterHarness(root / "cluster", 3)
    console = None
    driver = None
    try:
        cluster.start()
        admin = cluster.admin()
        admin.create_topics(
            [NewTopic(TOPIC, num_partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})]
        )
        cluster.wait_full_isr(TOPIC, 3)
        with Producer(cluster.bootstrap(), acks="all") as p:
            for i in range(30):
                p.send(TOPIC, f'{{"n": {i}}}'.encode(), key=f"k{i}".encode(), partition=i % 3)
            p.flush()
        # A group with committed offsets and no members: its lag is stable for comparison with kl-groups.
        admin.alter_group_offsets(GROUP, {(TOPIC, 0): 3, (TOPIC, 1): 5, (TOPIC, 2): 10})
        # An open cluster: the console changes it only with --allow-writes (the create/delete test below).
        console = Console(cluster.bootstrap(), root, "--allow-writes")
        driver = chrome(root / "chrome")
        yield cluster, console, driver, root
    finally:
        if driver is not None:
            driver.quit()
        if console is not None:
            console.close()
        cluster.cleanup()


def js_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def load(driver, url: str, ready_css: str, timeout: float = 10) -> None:
    driver.get(url)
    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, ready_css), timeout, f"{ready_css} on {url}")


def cells(driver, css: str) -> list[str]:
    # In one script call: the page re-renders every second, so element handles go stale between calls.
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map((e) => e.innerText)", css
    )


def click(driver, css: str) -> None:
    """Click what `css` finds, found again if a live refresh replaced it between finding and clicking."""

    def once() -> bool:
        driver.find_element(By.CSS_SELECTOR, css).click()
        return True

    # 30 s: on a loaded machine each WebDriver round trip can outlast the page's one-second re-render, and the
    # element found is gone by the click (StaleElementReferenceException) for seconds in a row (ci101).
    wait_until(once, 30, f"a click on {css}")


def save(driver, root: Path, name: str) -> None:
    driver.save_screenshot(str(root / name))
    out = os.environ.get("KL_SCREENSHOTS_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(out) / name))


def run_cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_page_loads_without_javascript_errors(env):
    cluster, console, driver, _ = env
    pages = {
        "/cluster": "#brokers tr[data-broker]",
        "/topics": f"#topics tr[data-topic='{TOPIC}']",
        f"/topics/{TOPIC}": "#partitions tr[data-partition]",
        f"/messages?topic={TOPIC}&partition=0": "#messages tr[data-offset]",
        "/groups": f"#groups tr[data-group='{GROUP}']",
        f"/groups/{GROUP}": "#group-partitions tr[data-tp]",
        "/throughput": "#c-b-msgs .uplot",
    }
    driver.get_log("browser")  # drop anything logged before
    for path, ready in pages.items():
        load(driver, console.url + path, ready)
        time.sleep(1.2)  # at least one live update on each page
        assert js_errors(driver) == [], f"JavaScript errors on {path}"
        assert "Traceback" not in driver.page_source


def test_kl_dashboard_prints_its_url_on_stdout(env):
    _, console, _, _ = env
    assert console.out_path.read_text() == f"Kafka Lite console: {console.url}/cluster\n"


def test_the_first_paint_has_the_data_without_the_event_stream(env):
    cluster, console, driver, _ = env
    # The page as served holds the snapshot: the cluster's brokers and topics before any event.
    with urllib.request.urlopen(console.url + "/cluster", timeout=10) as r:
        html = r.read().decode()
    embedded = re.search(r'<script id="kl-snapshot" type="application/json">(.*?)</script>', html, re.S)
    assert embedded is not None
    snap = json.loads(embedded[1])
    assert snap["ready"] and {b["id"] for b in snap["brokers"]} == {1, 2, 3}
    assert TOPIC in {t["name"] for t in snap["topics"]}
    # In the browser with the event stream blocked: every page still paints its data.
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/api/events*"]})
    try:
        for path, ready in (
            ("/cluster", f"#cluster-partitions tr[data-tp='{TOPIC}-0']"),
            ("/topics", f"#topics tr[data-topic='{TOPIC}']"),
            (f"/topics/{TOPIC}", "#partitions tr[data-partition]"),
            (f"/groups/{GROUP}", "#group-partitions tr[data-tp]"),
        ):
            load(driver, console.url + path, ready, timeout=5)
            # "snapshot · 12:50:01", or "reconnecting… · data of 12:50:01" once the blocked stream failed.
            assert re.search(r"(snapshot|data of) \d\d:\d\d:\d\d", driver.find_element(By.ID, "live").text), path
        time.sleep(1.5)  # the watcher publishes about once a second: none of it reaches the page
        assert not driver.find_element(By.ID, "live").text.startswith("live")
    finally:
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        driver.execute_cdp_cmd("Network.disable", {})
    load(driver, console.url + "/cluster", "#brokers tr[data-broker]")
    wait_until(lambda: driver.find_element(By.ID, "live").text.startswith("live · "), 10, "the event stream")


def test_a_hostile_group_id_cannot_break_out_of_the_embedded_snapshot(env):
    """Group ids are any string a client sends; the page embeds the snapshot in a <script> element, so a group
    named to close it and open markup of its own must stay data: escaped in the HTML, run nowhere."""
    cluster, console, driver, _ = env
    hostile = '</script><img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
    cluster.admin().alter_group_offsets(hostile, {(TOPIC, 0): 1})

    def served() -> str | None:
        with urllib.request.urlopen(console.url + "/groups", timeout=10) as r:
            html = r.read().decode()
        embedded = re.search(r'<script id="kl-snapshot" type="application/json">(.*?)</script>', html, re.S)
        assert embedded is not None, html
        return html if hostile in {g["group_id"] for g in json.loads(embedded[1])["groups"]} else None

    html = wait_until(served, 30, "the hostile group in the served snapshot")
    assert "</script><img" not in html and "<script>window.__pwned" not in html
    load(driver, console.url + "/groups", "#groups tr")
    time.sleep(1.5)  # a live update too draws the group list
    assert driver.execute_script("return window.__pwned === undefined")
    assert js_errors(driver) == []


def test_internal_topics_are_counted_apart_and_listed_on_demand(env):
    cluster, console, driver, _ = env
    admin = cluster.admin()
    described = admin.describe_topics(admin.list_topics(include_internal=True))
    user = sum(len(t.partitions) for t in described if not t.name.startswith("__"))
    internal = sum(len(t.partitions) for t in described if t.name.startswith("__"))
    assert internal > 0  # the group's committed offsets live in __consumer_offsets
    load(driver, f"{console.url}/cluster", f"#cluster-partitions tr[data-tp='{TOPIC}-0']")
    driver.execute_script("localStorage.removeItem('kl.showInternal')")
    load(driver, f"{console.url}/cluster", f"#cluster-partitions tr[data-tp='{TOPIC}-0']")

    def partition_rows() -> list[str]:
        return driver.execute_script(
            "return Array.from(document.querySelectorAll('#cluster-partitions tr[data-tp]')).map((r) => r.dataset.tp)"
        )

    # The figure is the table's: "3 (+50 internal)", not 53 over a table of 3.
    wait_until(lambda: cells(driver, "#count-partitions") == [str(user)], 10, f"{user} partitions counted")
    assert cells(driver, "#count-partitions-internal") == [f"(+{internal} internal)"]
    assert len(partition_rows()) == user
    click(driver, "#show-internal")
    wait_until(lambda: len(partition_rows()) == user + internal, 5, "the internal partitions listed")
    assert sum(tp.startswith("__consumer_offsets-") for tp in partition_rows()) == internal
    # The choice holds on /topics too, and is undone there.
    load(driver, f"{console.url}/topics", "#topics tr[data-topic='__consumer_offsets']")
    assert cells(driver, "#topics tr[data-topic='__consumer_offsets'] .badge") == ["internal"]
    click(driver, "#show-internal")
    wait_until(lambda: not cells(driver, "#topics tr[data-topic='__consumer_offsets']"), 5, "internal topics hidden")
    load(driver, f"{console.url}/cluster", f"#cluster-partitions tr[data-tp='{TOPIC}-0']")
    assert len(partition_rows()) == user


def test_rates_are_steady_for_a_batching_producer_and_carry_units(env):
    # 100 msg/s sent as a burst of 200 records every 2 s: a rate between two scrapes a second apart reads
    # 0 or ~200; the console's rate over its 15 s window rises with each burst and never falls back to 0.
    cluster, console, driver, _ = env
    topic, bursts, burst = "rates", 3, 200
    cluster.admin().create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    load(driver, f"{console.url}/topics", f"#topics tr[data-topic='{topic}']", timeout=15)
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.extend(cells(driver, f"#topics tr[data-topic='{topic}'] .msgs-in"))
            time.sleep(0.25)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with Producer(cluster.bootstrap(), acks=1) as p:
            for b in range(bursts):
                t0 = time.monotonic()
                for i in range(burst):
                    p.send(topic, b"x" * 100, partition=i % 3)
                p.flush()
                if b < bursts - 1:
                    time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
        # Once the window holds all the bursts the rate is their count over the window (15 s, and up to a
        # slow poll's scrape interval more).
        window, sent = 15.0, bursts * burst
        try:
            wait_until(
                lambda: sent / (window + 5) <= float(seen[-1].split()[0]) <= sent / window * 1.05,
                10,
                f"the rate of {sent} records over the {window} s window",
            )
        except AssertionError as e:
            raise AssertionError(f"{e}; shown: {seen[-8:]}") from None
    finally:
        stop.set()
        watcher.join()
    assert all(v.endswith(" msgs/s") for v in seen), set(seen)
    values = [float(v.split()[0]) for v in seen]
    first = next(i for i, v in enumerate(values) if v > 0)
    assert min(values[first:]) > 0, values  # no flip to 0 between bursts
    assert max(values) <= sent / window * 1.05, values  # and no spike
    for unit_cell in (".bytes-in", ".bytes-out"):
        text = cells(driver, f"#topics tr[data-topic='{topic}'] {unit_cell}")[0]
        assert re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)/s", text), text
    cluster.admin().delete_topics([topic])


def test_topic_page_matches_kl_topics_describe(env):
    cluster, console, driver, _ = env
    out = run_cli("client.cli.topics", "--bootstrap-server", cluster.bootstrap(), "--describe", "--topic", TOPIC)
    want = {
        int(m[1]): (m[2], m[3], m[4])
        for m in re.finditer(r"Partition: (\d+)\tLeader: (\S+)\tReplicas: (\S+)\tIsr: (\S+)", out)
    }
    assert len(want) == 3
    load(driver, f"{console.url}/topics/{TOPIC}", "#partitions tr[data-partition]")

    def shown() -> dict:
        rows = zip(
            cells(driver, "#partitions tr[data-partition] td:first-child"),
            cells(driver, "#partitions tr[data-partition] .leader"),
            cells(driver, "#partitions tr[data-partition] .replicas"),
            cells(driver, "#partitions tr[data-partition] .isr"),
        )
        return {int(p): (leader, replicas.strip("[]"), isr.strip("[]")) for p, leader, replicas, isr in rows}

    wait_until(lambda: shown() == want, 10, f"partitions as kl-topics describes them: {want}")
    load(driver, f"{console.url}/topics", f"#topics tr[data-topic='{TOPIC}']")
    assert cells(driver, f"#topics tr[data-topic='{TOPIC}'] td:nth-child(2)") == ["3"]  # partitions


def test_group_page_shows_the_lag_kl_groups_reports(env):
    cluster, console, driver, _ = env
    out = run_cli("client.cli.groups", "--bootstrap-server", cluster.bootstrap(), "--describe", "--group", GROUP)
    want = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == GROUP:
            want[f"{f[1]}-{f[2]}"] = f[5]
    assert want == {f"{TOPIC}-0": "7", f"{TOPIC}-1": "5", f"{TOPIC}-2": "0"}
    load(driver, f"{console.url}/groups/{GROUP}", "#group-partitions tr[data-tp]")

    def lags() -> dict:
        tps = driver.execute_script(
            "return Array.from(document.querySelectorAll('#group-partitions tr[data-tp]'))"
            ".map((r) => [r.dataset.tp, r.querySelector('.lag').innerText])"
        )
        return dict(tps)

    wait_until(lambda: lags() == want, 10, f"group lag {want} on the page (shown: {lags()})")
    assert cells(driver, "#group-lag") == ["12"]
    time.sleep(2)  # a few points on the lag chart
    save(driver, env[3], "dashboard-group.png")


def test_messages_page_shows_records_just_produced(env):
    cluster, console, driver, _ = env
    fresh = {f"fresh-{i}": f"value-{i}-{time.time_ns()}" for i in range(5)}
    with Producer(cluster.bootstrap(), acks="all") as p:
        for k, v in fresh.items():
            p.send(TOPIC, v.encode(), key=k.encode(), partition=1)
        p.flush()
    load(driver, f"{console.url}/messages?topic={TOPIC}&partition=1&mode=newest&limit=20", "#messages tr[data-offset]")
    rows = driver.find_elements(By.CSS_SELECTOR, "#messages tr[data-offset]")
    shown = {r.find_element(By.CSS_SELECTOR, ".key").text: r.find_element(By.CSS_SELECTOR, ".value").text for r in rows}
    for k, v in fresh.items():
        assert shown.get(k) == v
    offsets = [int(r.get_attribute("data-offset")) for r in rows]
    assert offsets == sorted(offsets, reverse=True)  # newest first
    # JSON values are pretty-printed; the search box filters what was loaded.
    load(
        driver, f"{console.url}/messages?topic={TOPIC}&partition=0&mode=beginning&limit=5", "#messages tr[data-offset]"
    )
    first = driver.find_element(By.CSS_SELECTOR, "#messages tr[data-offset] .value")
    assert first.get_attribute("data-kind") == "json" and '"n": 0' in first.text
    driver.find_element(By.ID, "search").send_keys("k3")
    wait_until(lambda: cells(driver, "#messages tr[data-offset] .key") == ["k3"], 5, "search to keep only k3")
    # Every partition of the topic (the default), newest first by time; then the partition filter.
    load(driver, f"{console.url}/messages?topic={TOPIC}&mode=newest&limit=50", "#messages tr[data-offset]")
    assert driver.find_element(By.CSS_SELECTOR, "#msg-form select[name=partition]").get_attribute("value") == "all"

    def rows() -> list[list[str]]:
        return driver.execute_script(
            "return Array.from(document.querySelectorAll('#messages tr[data-offset]')).map((r) =>"
            " [r.dataset.partition, r.cells[2].innerText, r.querySelector('.key').innerText])"
        )

    all_parts = rows()
    assert len(all_parts) == 30 + len(fresh)  # every record of the topic: the module's 30, these 5
    assert {p for p, _, _ in all_parts} == {"0", "1", "2"}
    stamps = [ts for _, ts, _ in all_parts]
    assert stamps == sorted(stamps, reverse=True)  # ISO times: newest first across partitions
    assert {k for _, _, k in all_parts[:5]} == set(fresh)  # the records just produced come first
    driver.find_element(By.CSS_SELECTOR, "#msg-form select[name=partition] option[value='2']").click()
    wait_until(lambda: rows() and {p for p, _, _ in rows()} == {"2"}, 10, "only partition 2 after filtering")
    assert "partition=2" in driver.current_url
    # Bad requests are one-line errors.
    for query, why in (("topic=no-such-topic", "unknown topic"), (f"topic={TOPIC}&partition=x", "bad request")):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{console.url}/api/messages?{query}", timeout=15)
        assert e.value.code == 400
        message = json.loads(e.value.read())["error"]
        assert why in message and "\n" not in message, message


def test_sigkill_shows_broker_down_new_leaders_and_election_then_return(env):
    cluster, console, driver, root = env
    admin = cluster.admin()
    victim = admin.describe_topics([TOPIC])[0].partitions[0].leader
    load(driver, f"{console.url}/cluster", "#brokers tr[data-broker]")
    cluster[victim].kill(signal.SIGKILL)
    t0 = time.monotonic()

    def status(bid: int) -> str:
        return driver.find_element(By.CSS_SELECTOR, f"#brokers tr[data-broker='{bid}'] .status").text

    def led_by_victim() -> list[str]:
        return [
            r.get_attribute("data-tp")
            for r in driver.find_elements(By.CSS_SELECTOR, "#cluster-partitions tr[data-tp]")
            if r.find_element(By.CSS_SELECTOR, ".leader").text == str(victim)
        ]

    wait_until(lambda: status(victim) == "down", 5, f"broker {victim} shown down")
    wait_until(lambda: not led_by_victim(), 15, f"new leaders for the partitions broker {victim} led")
    wait_until(
        lambda: any("leader" in t and f"{TOPIC}-0" in t for t in cells(driver, "#timeline li")),
        5,
        "the leader election in the timeline",
    )
    assert time.monotonic() - t0 < 20
    assert any(f"broker {victim} down" in t for t in cells(driver, "#timeline li"))
    wait_until(lambda: any(f"broker {victim}" in e for e in cells(driver, "#errors div")), 5, "the one-line error")
    assert all("\n" not in e and "Traceback" not in e for e in cells(driver, "#errors div"))
    save(driver, root, "dashboard-failover.png")
    cluster[victim].start()

    def isrs_full() -> bool:
        rows = driver.find_elements(By.CSS_SELECTOR, "#cluster-partitions tr[data-tp]")
        return bool(rows) and all(
            str(victim) in r.find_element(By.CSS_SELECTOR, ".isr").text.strip("[]").split(",") for r in rows
        )

    wait_until(lambda: status(victim) == "up", 20, f"broker {victim} shown up again")
    wait_until(isrs_full, 30, f"broker {victim} back in every ISR on the page")
    wait_until(lambda: any("ISR expand" in t for t in cells(driver, "#timeline li")), 5, "ISR expand in the timeline")
    assert js_errors(driver) == []


def test_create_and_delete_a_topic_from_the_topics_page(env):
    cluster, console, driver, _ = env
    load(driver, f"{console.url}/topics", f"#topics tr[data-topic='{TOPIC}']")

    def submit(name: str) -> None:
        box = driver.find_element(By.CSS_SELECTOR, "#create-topic input[name=name]")
        box.clear()
        box.send_keys(name)
        driver.find_element(By.CSS_SELECTOR, "#create-topic button").click()

    # What the user types survives the live refreshes (the form is not redrawn under them).
    box = driver.find_element(By.CSS_SELECTOR, "#create-topic input[name=name]")
    box.send_keys("half-typed")
    first = driver.find_element(By.ID, "live").text
    wait_until(lambda: driver.find_element(By.ID, "live").text != first, 10, "a live update")
    assert box.get_attribute("value") == "half-typed"
    submit(TOPIC)  # exists already: a one-line error on the page
    wait_until(lambda: any(f"create {TOPIC}" in e for e in cells(driver, "#errors div")), 10, "the create error")
    assert all("\n" not in e and "Traceback" not in e for e in cells(driver, "#errors div"))
    submit("scratch")
    wait_until(lambda: cells(driver, "#topics tr[data-topic='scratch'] td:nth-child(2)") == ["3"], 15, "scratch listed")
    # Over plain HTTP as the page does it: its cookie, CSRF token, Origin and a JSON body.
    assert Browser.anonymous(console).send("DELETE", "/api/topics/scratch").status == 200
    wait_until(lambda: not cells(driver, "#topics tr[data-topic='scratch']"), 15, "scratch gone from the list")


def test_kl_cluster_up_dashboard_prints_the_console_and_metrics_urls(tmp_path):
    for _ in range(20):  # a base port whose +100 (metrics.port) is free too
        base, dash = free_ports(2)
        with socket.socket() as s:
            try:
                s.bind((HOST, base + 100))
                break
            except OSError:
                continue
    data = tmp_path / "kl"
    kl = [sys.executable, "-m", "client.cli.cluster"]
    up = subprocess.run(
        [
            *kl,
            "up",
            "--brokers",
            "1",
            "--base-port",
            str(base),
            "--data-dir",
            str(data),
            "--dashboard",
            "--dashboard-port",
            str(dash),
            "--dashboard-allow-writes",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines() == [
            f"127.0.0.1:{base}",
            f"# ports: native {base}, metrics {base + 100}, console {dash}",
        ]
        assert f"console: http://127.0.0.1:{dash}/cluster" in up.stderr
        assert f"broker 1 metrics: http://127.0.0.1:{base + 100}/metrics" in up.stderr
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{base + 100}/metrics", timeout=5).read().decode()
        assert "kafkalite_leader_count" in metrics
        wait_until(
            lambda: (
                b'"ready":true' in urllib.request.urlopen(f"http://127.0.0.1:{dash}/api/snapshot", timeout=2).read()
            ),
            20,
            "the console's first snapshot",
        )
        # --dashboard-allow-writes: the open cluster's console creates a topic (its page's cookie, token, Origin).
        page = Browser.anonymous(Console.attach(dash))
        created = page.send("POST", "/api/topics", {"name": "from-the-console", "partitions": 1})
        assert created.status == 200, created.body
        wait_until(
            lambda: "from-the-console" in [t["name"] for t in page.get("/api/topics").json()],
            20,
            "the console to list the topic it created",
        )
        status = subprocess.run([*kl, "status", "--data-dir", str(data)], cwd=ROOT, capture_output=True, text=True)
        assert f"console\thttp://127.0.0.1:{dash}/cluster" in status.stdout and "\tup" in status.stdout
    finally:
        down = subprocess.run([*kl, "down", "--data-dir", str(data)], cwd=ROOT, capture_output=True, text=True)
    assert "stopped the console" in down.stdout
    wait_until(lambda: not _listening(dash), 10, "the console to stop")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False

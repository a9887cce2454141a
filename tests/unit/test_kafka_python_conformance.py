"""bench/conformance/pytest_report.py and kafka_python.py: a junit XML becomes per-file totals, unit and
integration parts apart, and failures grouped by cause; the sessions and requirements the harness derives."""

from __future__ import annotations

import re
from pathlib import Path

from bench.conformance import kafka_python
from bench.conformance.jest_report import Rule, classifier
from bench.conformance.kafka_python_fixtures import listener_key
from bench.conformance.pytest_report import failure_logs, module_path, parse, report, skip_reasons, summary, with_logs

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="test.integration.test_admin_integration" name="test_acls" time="0.5">
  <failure message="AssertionError: assert 1 == 0">def test_acls():
&gt;       assert len(acls) == 0
E       AssertionError: assert 1 == 0
E        +  where 1 = len([...])
test/integration/test_admin_integration.py:44: AssertionError</failure>
</testcase>
<testcase classname="test.integration.test_ssl_integration.TestSSLConnection" name="test_ssl_handshake" time="0.1">
  <error message="failed on setup with &quot;RuntimeError: no listener&quot;">E   RuntimeError: no listener</error>
</testcase>
<testcase classname="test.integration.test_sasl_integration" name="test_admin[PLAIN]" time="0.0">
  <skipped type="pytest.skip" message="Testing on external Kafka Broker">x.py:14: Testing on external Kafka
  Broker</skipped>
</testcase>
<testcase classname="test.test_codec" name="test_gzip" time="0.01"/>
<testcase classname="test.integration.test_admin_integration" name="test_acls" time="0.4">
  <failure message="AssertionError: again">E   AssertionError: again</failure>
</testcase>
</testsuite></testsuites>
"""


def test_module_path_with_and_without_the_suite_at_hand(tmp_path: Path) -> None:
    (tmp_path / "test" / "integration").mkdir(parents=True)
    (tmp_path / "test" / "integration" / "test_ssl_integration.py").write_text("")
    cls = "test.integration.test_ssl_integration.TestSSLConnection"
    assert module_path(cls, tmp_path) == ("test/integration/test_ssl_integration.py", "TestSSLConnection")
    assert module_path(cls, None) == ("test/integration/test_ssl_integration.py", "TestSSLConnection")
    assert module_path("test.test_codec", None) == ("test/test_codec.py", "")


def test_outcomes_parts_and_causes() -> None:
    cases = parse(XML)
    assert [(c.path, c.name, c.outcome) for c in cases] == [
        ("test/integration/test_admin_integration.py", "test_acls", "failed"),
        ("test/integration/test_ssl_integration.py", "TestSSLConnection::test_ssl_handshake", "error"),
        ("test/integration/test_sasl_integration.py", "test_admin[PLAIN]", "skipped"),
        ("test/test_codec.py", "test_gzip", "passed"),
        ("test/integration/test_admin_integration.py", "test_acls", "failed"),
    ]
    assert cases[0].message == "AssertionError: assert 1 == 0\n+  where 1 = len([...])"
    rep = report(cases, classifier([Rule("no listener", re.compile("no listener"))]))
    # the later result of the same test replaces the earlier (a rerun counts once)
    assert [f.message for f in rep.failures if f.test == "test_acls"] == ["AssertionError: again"]
    integration = {"passed": 0, "failed": 1, "errors": 1, "skipped": 1, "files": 3}
    assert rep.totals(kafka_python.is_integration) == integration
    assert rep.totals(lambda p: not kafka_python.is_integration(p))["passed"] == 1
    causes = dict(rep.by_cause())
    assert [f.test for f in causes["no listener"]] == ["TestSSLConnection::test_ssl_handshake"]
    assert "other: AssertionError: again" in causes
    assert skip_reasons(rep.cases) == [("Testing on external Kafka Broker", 1)]
    assert summary("a\n\nb\nc\nd") == "a b c"


def test_render_names_parts_files_and_causes() -> None:
    rep = report(parse(XML), classifier([]))
    body = kafka_python.render(rep, "2026-01-01 00:00 UTC", "python -m x", 3.0, "asyncio")
    assert "Net backend: `asyncio`" in body
    assert "**Integration tests (`test/integration/`, against Kafka Lite): 0 passed, 1 failed, 1 errors" in body
    ssl = "`test/integration/test_ssl_integration.py::TestSSLConnection::test_ssl_handshake`"
    assert f"{ssl} (error in a fixture)" in body
    assert kafka_python.HEADER.search(body)[3] == "python -m x"  # what --from-junit reads back


def test_sessions_keep_the_sasl_file_out_of_the_external_mode() -> None:
    main, sasl = kafka_python.sessions(False, [])
    assert main.external and f"--ignore={kafka_python.SASL_FILE}" in main.args
    assert not sasl.external and sasl.args == [kafka_python.SASL_FILE]
    (only_sasl,) = kafka_python.sessions(False, ["test/integration/test_sasl_integration.py", "-k", "PLAIN"])
    assert only_sasl.external is False
    assert kafka_python.sessions(True, [])[0].args == list(kafka_python.SMOKE)


def test_requirements_leave_out_lint_doc_and_coverage_tools(tmp_path: Path) -> None:
    dev = ("coveralls", "crc32c", "docker-py", "lz4", "py", "pytest", "Sphinx", "pytest-cov")
    (tmp_path / "requirements-dev.txt").write_text("\n".join(dev) + "\n")
    assert kafka_python.test_requirements(tmp_path) == ["crc32c", "lz4", "py", "pytest"]
    assert listener_key("sasl_plaintext", "scram-sha-256") == "SASL_PLAINTEXT:SCRAM-SHA-256"
    assert listener_key("SSL", None) == "SSL"


LOG = """
=================================== FAILURES ===================================
____________________________ TestSSLConnection.test_ssl_handshake _____________________________
E   RuntimeError: no listener
------------------------------ Captured log call -------------------------------
14:08:13.436 WARNING  1399:MainThread kafka.consumer.fetcher  Attempt 12 failed due to: InvalidRequestError
14:08:13.437 DEBUG    1399:MainThread kafka.conn  Sending 3
14:08:13.438 WARNING  1399:MainThread kafka.consumer.fetcher  Attempt 13 failed due to: InvalidRequestError
----------------------------- Captured stderr call -----------------------------
ERROR:kafka.producer:boom 7
_____________________________ test_acls _____________________________
E   AssertionError
"""


def test_failure_logs_give_each_failure_the_warnings_its_log_holds() -> None:
    logs = failure_logs(LOG)
    assert logs == {
        "TestSSLConnection.test_ssl_handshake": [
            "WARNING kafka.consumer.fetcher: Attempt N failed due to: InvalidRequestError",
            "ERROR kafka.producer: boom N",
        ],
        "test_acls": [],
    }
    cases = with_logs(parse(XML), logs)
    (ssl,) = next(c for c in cases if c.outcome == "error").errors
    assert ssl.when == "setup"
    assert ssl.message.endswith("log:\nWARNING kafka.consumer.fetcher: Attempt N failed due to: InvalidRequestError\n"
                                "ERROR kafka.producer: boom N")  # fmt: skip
    assert summary(ssl.message) == 'failed on setup with "RuntimeError: no listener" RuntimeError: no listener'

"""bench/conformance/pytest_report.py on aiokafka's report (xunit1: each testcase names its `file`): pytest's JUnit
XML becomes per-file totals, skip reasons and failures grouped by cause, a failure and a teardown error of one test
counted apart; bench/conformance/aiokafka.py's fixtures module and conftest patch."""

from __future__ import annotations

import re
from pathlib import Path

from bench.conformance.aiokafka import CONFTEST_LINE, FIXTURES_AS, patch_conftest, pytest_command
from bench.conformance.jest_report import Rule, classifier
from bench.conformance.pytest_report import parse, report, skip_reasons

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5" time="12.5">
<testcase classname="tests.test_sasl.TestKafkaSASL" name="test_sasl_plaintext_basic" file="tests/test_sasl.py"
  line="180" time="1.0" />
<testcase classname="tests.test_sasl.TestKafkaSASL" name="test_sasl_plaintext_gssapi" file="tests/test_sasl.py"
  time="0.1"><skipped type="pytest.skip" message="GSSAPI/Kerberos: no">tests/_x.py:3: GSSAPI/Kerberos: no</skipped>
</testcase>
<testcase classname="tests.test_consumer.TestConsumerIntegration" name="test_a" file="tests/test_consumer.py"
  time="3"><failure message="AssertionError: 1 != 2">self = x

    def test_a(self):
&gt;       self.assertEqual(1, 2)
E       AssertionError: 1 != 2
E       +  where 1 = f()

tests/test_consumer.py:9: AssertionError</failure><error message="failed on teardown with &quot;RuntimeError: \
boom&quot;">E   RuntimeError: boom</error></testcase>
<testcase classname="tests.test_helpers" name="test_create_ssl_context" time="0.2">
  <error message="failed on setup with &quot;KeyError: x&quot;">E   KeyError: 'x'</error></testcase>
</testsuite></testsuites>
"""


def test_totals_per_file_with_errors_counted_apart() -> None:
    cases = parse(XML)
    rep = report(cases, classifier([]))
    files = {f.path: (f.passed, f.failed, f.errors, f.skipped) for f in rep.files()}
    assert files == {
        "tests/test_consumer.py": (0, 1, 1, 0),
        "tests/test_helpers.py": (0, 0, 1, 0),  # no `file` attribute: from the dotted classname
        "tests/test_sasl.py": (1, 0, 0, 1),
    }
    assert rep.totals() == {"passed": 1, "failed": 1, "errors": 2, "skipped": 1, "files": 3}
    assert skip_reasons(rep.cases) == [("GSSAPI/Kerberos: no", 1)]
    assert [c.seconds for c in cases] == [1.0, 0.1, 3.0, 0.2]  # each testcase's time (the suite's: 12.5)
    failed = next(c for c in cases if c.outcome == "failed")  # its body failed, then its teardown raised
    assert [e.when for e in failed.errors] == ["teardown"]


def test_failures_carry_the_raised_lines_and_their_cause() -> None:
    rep = report(parse(XML), classifier([Rule("boom at teardown", re.compile("boom"))]))
    by_test = {f.label: f for f in rep.failures}
    assert by_test["TestConsumerIntegration::test_a"].message == "AssertionError: 1 != 2\n+  where 1 = f()"
    assert by_test["TestConsumerIntegration::test_a (error in teardown)"].cause == "boom at teardown"
    assert by_test["test_create_ssl_context (error in setup)"].cause == 'other: failed on setup with "KeyError: x"'


def test_conftest_is_patched_once_and_the_fixtures_copied(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text("import pytest\n")
    patch_conftest(tmp_path)
    patch_conftest(tmp_path)
    assert (tmp_path / "tests" / "conftest.py").read_text().count(CONFTEST_LINE) == 1
    assert "def kafka_server(" in (tmp_path / "tests" / FIXTURES_AS).read_text()


def test_pytest_runs_with_the_ci_flags_and_the_whole_suite_by_default(tmp_path: Path) -> None:
    cmd = pytest_command(tmp_path, tmp_path / "junit.xml", 300, [])
    assert cmd[-1] == "tests" and "--docker-image" in cmd and "--maxfail=3" not in cmd
    assert pytest_command(tmp_path, tmp_path / "j.xml", 300, ["tests/test_sasl.py"])[-1] == "tests/test_sasl.py"

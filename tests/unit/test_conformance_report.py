"""bench/conformance/jest_report.py: a jest --json report becomes per-file totals and failures grouped by cause."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from bench.conformance.jest_report import Rule, classifier, clean, parse, summary
from bench.conformance.kafkajs import RULES, kafka_error_rules

ROOT = "/src/kafkajs"


def _assertion(title: str, status: str, message: str = "") -> dict:
    return {
        "ancestorTitles": ["Producer"],
        "title": title,
        "fullName": f"Producer {title}",
        "status": status,
        "failureMessages": [message] if message else [],
    }


REPORT = {
    "testResults": [
        {
            "name": f"{ROOT}/src/producer/index.spec.js",
            "status": "failed",
            "assertionResults": [
                _assertion("sends", "passed"),
                _assertion(
                    "support SSL connections",
                    "failed",
                    "KafkaJSConnectionError: connect ECONNREFUSED 127.0.0.1:9093\n    at Socket.emit (node:events:1)",
                ),  # fmt: skip
                _assertion("idempotent", "failed", "\x1b[31mError: expect(received).toEqual(expected)\x1b[39m\n\nx 12"),
                _assertion("old", "pending"),
            ],
        },
        {
            "name": f"{ROOT}/src/admin/__tests__/x.spec.js",
            "status": "failed",
            "message": "Cannot find module 'y'",
            "assertionResults": [],
        },  # fmt: skip
    ]
}


def test_totals_per_file_and_area() -> None:
    report = parse(REPORT, ROOT, classifier(RULES))
    files = {f.path: (f.passed, f.failed, f.skipped, f.error) for f in report.files}
    assert files == {
        "src/producer/index.spec.js": (1, 2, 1, None),
        "src/admin/__tests__/x.spec.js": (0, 0, 0, "Cannot find module 'y'"),
    }
    assert report.totals == {"passed": 1, "failed": 2, "skipped": 1, "files": 2, "files_not_run": 1}
    assert report.by_area() == [("src/admin", 0, 0, 0), ("src/producer", 1, 2, 1)]


def test_failures_grouped_by_cause_with_colours_and_stack_frames_removed() -> None:
    report = parse(REPORT, ROOT, classifier(RULES))
    causes = dict(report.by_cause())
    ssl = [c for c in causes if c.startswith("SSL/SASL")]
    assert len(ssl) == 1 and [f.test for f in causes[ssl[0]]] == ["Producer support SSL connections"]
    assert causes[ssl[0]][0].message == "KafkaJSConnectionError: connect ECONNREFUSED 127.0.0.1:9093"
    # an unknown error is grouped by its first line, numbers blurred
    assert [f.test for f in causes["other: Error: expect(received).toEqual(expected)"]] == ["Producer idempotent"]
    assert "(test file failed to run)" in [f.test for fs in causes.values() for f in fs]


def test_first_matching_rule_wins_and_name_rules_look_at_the_test_name() -> None:
    classify = classifier([Rule("by message", re.compile("boom")), Rule("by name", re.compile("SASL"), on="name")])
    assert classify("f", "SASL test", "boom") == "by message"
    assert classify("f", "SASL test", "other") == "by name"
    assert classify("f", "plain", "offset 123 at deadbeefcafe0001 gone") == "other: offset N at N gone"
    assert clean("a\n\n  at x (y:1)\nb", lines=5) == "a\nb"


def _kafkajs_error_table(root: Path, text: str) -> Callable[[str, str, str], str]:
    """A classifier from a checkout whose src/protocol/error.js holds `text`."""
    table = root / "src" / "protocol" / "error.js"
    table.parent.mkdir(parents=True)
    table.write_text(text)
    return classifier(kafka_error_rules(root))


def test_a_kafkajs_protocol_error_is_named_by_its_kafka_code(tmp_path: Path) -> None:
    classify = _kafkajs_error_table(
        tmp_path,
        "const errorCodes = [\n  {\n    type: 'INVALID_REQUEST',\n    code: 42,\n    retriable: false,\n"
        "    message:\n      'This request is malformed, it isn\\'t ok',\n  },\n]\n",
    )
    assert classify("f", "t", "KafkaJSProtocolError: This request is malformed, it isn't ok") == (
        "Kafka error INVALID_REQUEST (42)"
    )


def test_summary_says_what_was_expected_and_received() -> None:
    said = 'Error: expect(received).toBe(expected)\nExpected: "A"\nReceived: "B"'
    assert summary(said) == 'Error: expect(received).toBe(expected) Expected: "A" Received: "B"'
    diff = (
        'Error: expect(received).toEqual(expected)\n- Expected  - 1\n+ Received  + 1\nArray [\n-   "offset": "-1",\n'
        '+   "offset": "5",'
    )
    assert summary(diff).endswith('-   "offset": "-1", +   "offset": "5",')


def test_a_kafka_error_is_named_by_what_was_received_not_what_was_expected(tmp_path: Path) -> None:
    classify = _kafkajs_error_table(
        tmp_path,
        "[{ type: 'INVALID_REPLICA_ASSIGNMENT', code: 39, message: 'Replica assignment is invalid' },"
        " { type: 'INVALID_REQUEST', code: 42, message: 'Malformed' }]",
    )
    msg = 'Expected value: "Replica assignment is invalid"\nReceived value: "Malformed"'
    assert classify("f", "t", msg) == "Kafka error INVALID_REQUEST (42)"

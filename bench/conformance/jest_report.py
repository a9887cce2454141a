"""Jest's `--json` report of a client's own suite, reduced to what docs/COMPATIBILITY.md shows: totals per test
file, and every failing test with the cause its error message names, grouped by cause.

Pure (no I/O beyond what the caller passes in), so the grouping can be checked on recorded reports.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class FileResult:
    """One test file: its path relative to the suite's root and its tests by outcome."""

    path: str
    passed: int
    failed: int
    skipped: int
    error: str | None = None  # the file could not run at all (Jest's "Test suite failed to run")

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped


@dataclass(frozen=True)
class Failure:
    path: str
    test: str  # Jest's full name: describe blocks and the test's title
    message: str  # the first lines of the error, without colours
    cause: str = ""


@dataclass
class SuiteReport:
    files: list[FileResult] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, int]:
        return {
            "passed": sum(f.passed for f in self.files),
            "failed": sum(f.failed for f in self.files),
            "skipped": sum(f.skipped for f in self.files),
            "files": len(self.files),
            "files_not_run": sum(1 for f in self.files if f.error is not None),
        }

    def by_cause(self) -> list[tuple[str, list[Failure]]]:
        """Causes with their failures, the most frequent first."""
        groups: dict[str, list[Failure]] = defaultdict(list)
        for f in self.failures:
            groups[f.cause].append(f)
        return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))

    def by_area(self) -> list[tuple[str, int, int, int]]:
        """(src/<area>, passed, failed, skipped): kafkajs's own test groups (broker, admin, producer, ...)."""
        acc: dict[str, Counter[str]] = defaultdict(Counter)
        for f in self.files:
            parts = PurePosixPath(f.path).parts
            area = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
            acc[area].update(passed=f.passed, failed=f.failed, skipped=f.skipped)
        return [(a, c["passed"], c["failed"], c["skipped"]) for a, c in sorted(acc.items())]


def clean(text: str, lines: int = 12) -> str:
    """The error's first lines without colours, stack frames or blank lines."""
    out = []
    for line in ANSI.sub("", text).splitlines():
        s = line.strip()
        if not s or s.startswith("at "):
            continue
        out.append(s)
        if len(out) == lines:
            break
    return "\n".join(out)


def parse(report: Mapping[str, Any], root: str, classify: Callable[[str, str, str], str]) -> SuiteReport:
    """Jest's JSON (`--json --outputFile`) → a SuiteReport; `classify(path, test, message)` names each cause."""
    out = SuiteReport()
    prefix = root.rstrip("/") + "/"
    for tr in report.get("testResults", []):
        path = str(tr.get("name", "")).removeprefix(prefix)
        counts: Counter[str] = Counter()
        for a in tr.get("assertionResults", []):
            status = a.get("status")
            counts["skipped" if status in ("pending", "skipped", "todo", "disabled") else status] += 1
            if status == "failed":
                msg = clean("\n".join(a.get("failureMessages") or []))
                name = a.get("fullName") or " ".join([*a.get("ancestorTitles", []), a.get("title", "")])
                out.failures.append(Failure(path, name, msg, classify(path, name, msg)))
        error = None
        if not tr.get("assertionResults") and tr.get("status") == "failed":
            error = clean(str(tr.get("message", "")))
            out.failures.append(Failure(path, "(test file failed to run)", error, classify(path, "", error)))
        out.files.append(FileResult(path, counts["passed"], counts["failed"], counts["skipped"], error))
    out.files.sort(key=lambda f: f.path)
    return out


@dataclass(frozen=True)
class Rule:
    """A cause: its name, and the pattern that the failure's `on` (its error "message", the test's "name" or
    the test file's "path") matches."""

    cause: str
    pattern: re.Pattern[str]
    on: str = "message"


def rules_of(causes: Sequence[tuple[str, str, str, str]]) -> tuple[tuple[Rule, ...], dict[str, str]]:
    """A harness's CAUSES, (cause, what the pattern looks at, the pattern, a note), as the rules that classify
    and the notes the report prints under each cause."""
    rules = tuple(Rule(cause, re.compile(pattern), on) for cause, on, pattern, _ in causes)
    return rules, {cause: note for cause, _, _, note in causes if note}


def classifier(rules: Sequence[Rule]) -> Callable[[str, str, str], str]:
    """The first rule that matches names the cause; else the error's first line, numbers and ids blurred so
    that the same error of different tests lands in one group."""

    def classify(path: str, test: str, message: str) -> str:
        # "received": what the broker's answer made of it, when the message also quotes what the test expected
        received = message.rsplit("Received", 1)[-1]
        fields = {"message": message, "name": test, "path": path, "received": received}
        for r in rules:
            if r.pattern.search(fields[r.on]):
                return r.cause
        first = message.splitlines()[0] if message else "(no message)"
        return "other: " + re.sub(r"[0-9a-f]{8,}[-\w]*|\d+", "N", first)[:160]

    return classify


def summary(message: str, width: int = 240) -> str:
    """One line for the table: the error's first line, and for an assertion what was expected and received
    (Jest's `Expected:`/`Received:` lines, or the first changed pair of its diff)."""
    lines = message.splitlines()
    if not lines:
        return ""
    said = [ln for ln in lines[1:] if re.match(r"(Expected|Received)( value| message| substring)?:", ln)]
    diff = [ln for ln in lines[1:] if re.match(r"[-+] (?!Expected|Received)", ln)]
    extra = said[:2] or diff[:2]
    return " ".join([lines[0], *extra])[:width]


def failing_files(report: SuiteReport) -> Iterable[FileResult]:
    return (f for f in report.files if f.failed or f.error)

"""A pytest `--junitxml` report of a client's own suite, reduced to what docs/COMPATIBILITY.md shows: totals per
test file (which a harness may split into parts, such as unit tests against mock brokers and integration tests
against ours), why tests were skipped, and every test that failed or errored with the cause its error names,
grouped by cause. Both pytest harnesses read their reports with it: aiokafka.py and kafka_python.py.

The pytest counterpart of jest_report.py (whose `Rule` and `classifier` it shares); read with the stdlib's
ElementTree. Pure but for `parse_file`, so the grouping can be checked on recorded reports.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass(frozen=True)
class FixtureError:
    """An exception outside a test's body: in a fixture's setup or teardown (pytest's "ERROR at setup of ...")."""

    when: str  # "setup", "teardown", or "" when pytest's message does not say
    message: str


@dataclass(frozen=True)
class Case:
    """One testcase of the XML: its file (relative to the suite's root), its name (with any class, as pytest's
    node id has it after the file), its outcome and what pytest said: for a failure, its detail; for a skip, the
    reason; the errors of its fixtures apart (a test whose body failed may have a teardown that raised too)."""

    path: str
    name: str
    outcome: str  # one of OUTCOMES; "error": the test raised only outside its body (see `errors`)
    message: str = ""  # "failed": the failure's first line(s) and pytest's `E` lines; "skipped": pytest's reason
    seconds: float = 0.0
    errors: tuple[FixtureError, ...] = ()

    @property
    def node_id(self) -> str:
        return f"{self.path}::{self.name}"


@dataclass(frozen=True)
class FileCounts:
    """pytest's counts for one file: a test that failed in its body and again in its teardown is one failure and
    one error, as pytest's summary line counts it."""

    path: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class Failure:
    path: str
    test: str
    outcome: str  # "failed" or "error"
    message: str
    cause: str = ""
    when: str = ""  # an error's: "setup", "teardown" or "" (unknown)

    @property
    def label(self) -> str:
        """The test's name, and for an error where it was raised: `test (error in teardown)`."""
        return self.test if self.outcome == "failed" else f"{self.test} (error in {self.when or 'a fixture'})"


@dataclass
class PytestReport:
    cases: list[Case] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    def files(self) -> list[FileCounts]:
        acc: dict[str, Counter[str]] = defaultdict(Counter)
        for c in self.cases:
            n = acc[c.path]
            n["errors"] += len(c.errors)
            if c.outcome != "error":
                n[c.outcome] += 1
        return [
            FileCounts(path, n["passed"], n["failed"], n["errors"], n["skipped"]) for path, n in sorted(acc.items())
        ]

    def totals(self, part: Callable[[str], bool] = lambda _path: True) -> dict[str, int]:
        """Tests by outcome (errors counted as in FileCounts), and how many files, of the files `part` selects."""
        files = [f for f in self.files() if part(f.path)]
        out = {k: sum(getattr(f, k) for f in files) for k in ("passed", "failed", "errors", "skipped")}
        return out | {"files": len(files)}

    def by_cause(self) -> list[tuple[str, list[Failure]]]:
        """Causes with their failures, the most frequent first."""
        groups: dict[str, list[Failure]] = defaultdict(list)
        for f in self.failures:
            groups[f.cause].append(f)
        return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def module_path(classname: str, root: Path | None) -> tuple[str, str]:
    """pytest's `classname` (`test.integration.test_x.TestClass`) → (the file, the class prefix of the name).
    With the suite's root at hand the longest dotted prefix that is a file there is the module; without it,
    the first component that starts with `test_` (pytest's default module pattern)."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        candidate = "/".join(parts[:i]) + ".py"
        if root is not None and (root / candidate).is_file():
            return candidate, ".".join(parts[i:])
    for i, p in enumerate(parts):
        if p.startswith("test_") or p.endswith("_test"):
            return "/".join(parts[: i + 1]) + ".py", ".".join(parts[i + 1 :])
    return "/".join(parts) + ".py", ""


def _location(tc: ET.Element, root: Path | None) -> tuple[str, str]:
    """The testcase's file and its class prefix: xunit1's `file` attribute when there is one, else from the
    dotted classname (`module_path`)."""
    classname, file = tc.get("classname", ""), tc.get("file")
    if file:
        module = file.removesuffix(".py").replace("/", ".")
        if classname == module or classname.startswith(module + "."):
            return file, classname[len(module) + 1 :]
    return module_path(classname, root)


def _detail(element: ET.Element, lines: int = 12) -> str:
    """The first line of pytest's message, then the `E` lines of its traceback (the assertion and what the
    values were), at most `lines` in all."""
    out = [m for m in (element.get("message") or "").splitlines()[:1] if m.strip()]
    for line in (element.text or "").splitlines():
        if line.startswith("E ") and len(out) < lines:
            text = line[1:].strip()
            if text and text not in out:
                out.append(text)
    return "\n".join(out)


def _fixture_error(element: ET.Element) -> FixtureError:
    when = re.search(r"failed on (setup|teardown)", element.get("message") or "")
    return FixtureError(when[1] if when else "", _detail(element))


def parse(xml_text: str, root: Path | None = None) -> list[Case]:
    """The testcases of one junit XML (pytest's xunit1 or xunit2, one or more `testsuite`s)."""
    cases = []
    for tc in ET.fromstring(xml_text).iter("testcase"):
        path, cls = _location(tc, root)
        name = "::".join([*cls.split("."), tc.get("name", "")]) if cls else tc.get("name", "")
        errors = tuple(_fixture_error(e) for e in tc.findall("error"))
        failure, skipped = tc.find("failure"), tc.find("skipped")
        if failure is not None:
            outcome, detail = "failed", _detail(failure)
        elif errors:
            outcome, detail = "error", ""
        elif skipped is not None:
            outcome, detail = "skipped", skipped.get("message") or ""
        else:
            outcome, detail = "passed", ""
        cases.append(Case(path, name, outcome, detail, float(tc.get("time") or 0), errors))
    return cases


def parse_file(path: Path, root: Path | None = None) -> list[Case]:
    return parse(path.read_text(), root)


def report(cases: Iterable[Case], classify: Callable[[str, str, str], str]) -> PytestReport:
    """Cases (of one or more runs: a later result of the same test replaces an earlier one, so a rerun file
    counts once) → the report: each failure, and each error of a fixture, with its cause named by
    `classify(path, test, message)`."""
    latest: dict[str, Case] = {}
    for c in cases:
        latest[c.node_id] = c
    out = PytestReport(cases=sorted(latest.values(), key=lambda c: (c.path, c.name)))
    for c in out.cases:
        if c.outcome == "failed":
            out.failures.append(Failure(c.path, c.name, "failed", c.message, classify(c.path, c.name, c.message)))
        for e in c.errors:
            cause = classify(c.path, c.name, e.message)
            out.failures.append(Failure(c.path, c.name, "error", e.message, cause, e.when))
    return out


# pytest's report of a failed test in its terminal output: a title line of underscores around the test's name
# (`Class.test[param]`, or `ERROR at setup of ...`), then its traceback and captured output.
SECTION = re.compile(r"^_{3,} (.+?) _{3,}$", re.MULTILINE)
# A log line at WARNING or above, in the log_format of the captured log ("12:00:00.000 WARNING  thread logger msg")
# or the stderr handler's ("WARNING:logger:msg").
WARNING_LINE = re.compile(
    r"^(?:[\d:.]+ +(WARNING|ERROR|CRITICAL) +\S+ +(\S+) +|(WARNING|ERROR|CRITICAL):([^:]+):)(.*)$"
)


def failure_logs(text: str, per_test: int = 12) -> dict[str, list[str]]:
    """The terminal output of a pytest run → for each test reported there (by the name its section title gives,
    `Class.test[param]`), the distinct warnings and errors its captured log holds (`LEVEL logger: message`,
    numbers blurred, at most `per_test`): what the client was told, where the assertion only says what was
    missing. A name reported twice (the same test name in two files) gets both sections' lines."""
    out: dict[str, list[str]] = {}
    titles = list(SECTION.finditer(text))
    for i, m in enumerate(titles):
        name = m.group(1).removeprefix("ERROR at setup of ").removeprefix("ERROR at teardown of ")
        body = text[m.end() : titles[i + 1].start() if i + 1 < len(titles) else len(text)]
        seen = out.setdefault(name, [])
        for line in body.splitlines():
            w = WARNING_LINE.match(line)
            if w is None or len(seen) >= per_test:
                continue
            level, logger = (w.group(1), w.group(2)) if w.group(1) else (w.group(3), w.group(4))
            said = f"{level} {logger}: " + re.sub(r"\d+", "N", w.group(5).strip())
            if said not in seen:
                seen.append(said)
    return out


def with_logs(cases: Iterable[Case], logs: dict[str, list[str]]) -> list[Case]:
    """Each failed or errored case with its section's warnings appended to its failure's and its errors' messages
    (after a `log:` line), so that causes can be told by what the broker answered."""
    out = []
    for c in cases:
        lines = logs.get(c.name.replace("::", "."), []) if c.outcome in ("failed", "error") else []
        if not lines:
            out.append(c)
            continue
        log = "\nlog:\n" + "\n".join(lines)
        errors = tuple(replace(e, message=e.message + log) for e in c.errors)
        out.append(replace(c, message=c.message + log if c.outcome == "failed" else c.message, errors=errors))
    return out


def summary(message: str, width: int = 240) -> str:
    """One line for the table: the error's first line and the next one or two (pytest's `E` lines, which hold
    the values an assertion compared)."""
    lines = [ln for ln in message.split("\nlog:\n", 1)[0].splitlines() if ln.strip()]
    return " ".join(lines[:3])[:width]


def cause_lines(
    rep: PytestReport, notes: dict[str, str], title: Callable[[str], str] = lambda cause: cause
) -> list[str]:
    """The markdown of a report's failures by cause, the most frequent first: each cause (as `title` words it) with
    its note, then each failing test and what it said."""
    lines: list[str] = []
    for cause, fails in rep.by_cause():
        lines += [f"**{title(cause)}** ({len(fails)})", ""]
        if cause in notes:
            lines += [notes[cause], ""]
        for f in fails:
            kind = "" if f.outcome == "failed" else " (error in a fixture)"
            said = summary(f.message).replace("|", "\\|")  # a table cell's bar would end the line's code span
            lines.append(f"- `{f.path}::{f.test}`{kind}: {said}".rstrip())
        lines.append("")
    return lines


def skip_reasons(cases: Sequence[Case]) -> list[tuple[str, int]]:
    """Why tests were skipped, the most frequent reason first (pytest's `file:line: reason` blurred to the reason)."""
    n = Counter(re.sub(r"^.*?:\d+: ", "", c.message) or "(no reason)" for c in cases if c.outcome == "skipped")
    return sorted(n.items(), key=lambda kv: (-kv[1], kv[0]))

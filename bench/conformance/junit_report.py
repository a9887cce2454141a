"""pytest's JUnit XML (`--junitxml`, `junit_family=xunit1`) of a client's own suite, reduced to what
docs/COMPATIBILITY.md shows: totals per test file, and every failing test with its cause (jest_report's rules
and classifier, shared with the kafkajs harness).

Pure (the caller reads the file), so the grouping can be checked on recorded reports.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.conformance.jest_report import Failure

# pytest's counts: a test that failed in its call and again in its teardown is one failure and one error.
OUTCOMES = ("passed", "failed", "errors", "skipped")


@dataclass(frozen=True)
class PytestFile:
    path: str
    passed: int = 0
    failed: int = 0
    errors: int = 0  # errors in a fixture's setup or teardown (pytest's "E" and "ERROR at setup of ...")
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped


@dataclass
class PytestReport:
    files: list[PytestFile] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)  # failures and errors; Failure.test says which
    skips: Counter[str] = field(default_factory=Counter)  # skip reason -> tests
    seconds: float = 0.0

    @property
    def totals(self) -> dict[str, int]:
        out = {k: sum(getattr(f, k) for f in self.files) for k in OUTCOMES}
        out["files"] = len(self.files)
        return out

    def by_cause(self) -> list[tuple[str, list[Failure]]]:
        """Causes with their failures, the most frequent first."""
        groups: dict[str, list[Failure]] = defaultdict(list)
        for f in self.failures:
            groups[f.cause].append(f)
        return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _text(el: ET.Element) -> str:
    """A failure's message: pytest's one-line `message` attribute, then the traceback's `E   ` lines (what was
    raised, the assertion's operands), without the source lines around them."""
    message = (el.get("message") or "").strip()
    raised = [ln[1:].strip() for ln in (el.text or "").splitlines() if ln.startswith("E ")]
    lines = [message, *[ln for ln in raised if ln and ln != message]]
    return "\n".join(ln for ln in lines if ln)[:4000]


def _path(case: ET.Element) -> str:
    """The test's file: xunit1's `file` attribute, else the dotted classname up to its module."""
    if case.get("file"):
        return str(case.get("file"))
    parts = (case.get("classname") or "").split(".")
    module = [p for p in parts if not p[:1].isupper()]  # drop the class names (TestX, ...)
    return "/".join(module) + ".py"


def test_id(case: ET.Element) -> str:
    """pytest's node id without the file: `Class::test` or `test`."""
    cls = [p for p in (case.get("classname") or "").split(".") if p[:1].isupper()]
    return "::".join([*cls, case.get("name") or "?"])


def parse(xml_text: str, classify: Callable[[str, str, str], str]) -> PytestReport:
    """The JUnit XML → a PytestReport; `classify(path, test, message)` names each failure's cause."""
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    out = PytestReport()
    for suite in suites:
        out.seconds += float(suite.get("time") or 0)
        for case in suite.iter("testcase"):
            path, test = _path(case), test_id(case)
            failure, errors, skipped = case.find("failure"), case.findall("error"), case.find("skipped")
            if failure is not None:
                counts[path]["failed"] += 1
                msg = _text(failure)
                out.failures.append(Failure(path, test, msg, classify(path, test, msg)))
            elif skipped is not None and not errors:
                counts[path]["skipped"] += 1
                out.skips[re.sub(r"^[^:]*:\d+: ", "", skipped.get("message") or "")] += 1
            elif not errors:
                counts[path]["passed"] += 1
            for e in errors:
                counts[path]["errors"] += 1
                msg = _text(e)
                when = re.search(r"failed on (setup|teardown)", e.get("message") or "")
                name = f"{test} (error in {when[1] if when else 'a fixture'})"
                out.failures.append(Failure(path, name, msg, classify(path, test, msg)))
    out.files = sorted(
        (PytestFile(path, **{k: c[k] for k in OUTCOMES}) for path, c in counts.items()), key=lambda f: f.path
    )
    return out

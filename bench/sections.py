"""docs/BENCHMARKS.md is assembled from sections, each between markers and written by one script."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from tabulate import tabulate


def publish(section: str, path: Path, start_mark: str, end_mark: str, write: bool = True) -> None:
    """Print a benchmark's section and, unless `write` is False (a quick or print-only run), put it into `path`."""
    if write:
        replace_section(path, start_mark, end_mark, section)
    print(section)


def replace_section(path: Path, start_mark: str, end_mark: str, body: str) -> None:
    """Put `body` between the markers (appending the marked block if it is not there yet), atomically."""
    text = (
        path.read_text()
        if path.exists()
        else "# Benchmarks\n\nMeasured on one machine; each section is written by the script it names.\n"
    )
    block = f"{start_mark}\n{body.rstrip()}\n{end_mark}"
    start, end = text.find(start_mark), text.find(end_mark)
    if start != -1 and end > start:
        text = text[:start] + block + text[end + len(end_mark) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def bench_parser(doc: str | None, default_records: int) -> argparse.ArgumentParser:
    """The arguments every cluster benchmark takes: --runs (median of), --num-records, --out."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--num-records", type=int, default=default_records)
    ap.add_argument("--out", type=Path, default=Path("docs/BENCHMARKS.md"))
    return ap


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table (tabulate), cells as given (format numbers before)."""
    return tabulate([list(r) for r in rows], headers=list(headers), tablefmt="github", disable_numparse=True)


def median_range(values: Sequence[float], fmt: str = ",.0f") -> str:
    """ "median (min–max)" of a run's figures, the form every section uses; one value alone; "n/a" for none."""
    if not values:
        return "n/a"
    med = format(statistics.median(values), fmt)
    return med if len(values) == 1 else f"{med} ({format(min(values), fmt)}–{format(max(values), fmt)})"

"""docs/BENCHMARKS.md is assembled from sections, each between markers and written by one script."""

from __future__ import annotations

import argparse
from pathlib import Path


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

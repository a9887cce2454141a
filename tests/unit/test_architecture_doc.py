"""docs/ARCHITECTURE.md's package map names every package and module, so a newcomer can trust it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "client", "election", "net", "pipeline", "bench")


def _tracked_modules() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [Path(p) for p in out.split() if p.split("/")[0] in PACKAGES and (ROOT / p).exists()]


def _package_rows(doc: str) -> dict[str, str]:
    """'pkg/sub/' -> its row: a package's own row starts with | **pkg/sub/**."""
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| **") and "/**" in line:
            rows[line[4 : line.index("/**") + 1]] = line
    return rows


def test_every_package_and_module_is_in_the_package_map():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = _package_rows(doc)
    missing = []
    for mod in _tracked_modules():
        pkg = f"{mod.parent.as_posix()}/"
        if pkg not in rows:
            missing.append(f"package {pkg} (a '| **{pkg}** |' row)")
            continue
        if mod.name == "__init__.py":
            continue
        # Named by its path anywhere, or by its file name in its package's row.
        if f"`{mod.as_posix()}`" not in doc and f"`{mod.name}`" not in rows[pkg]:
            missing.append(mod.as_posix())
    assert not missing, "docs/ARCHITECTURE.md's package map does not name: " + ", ".join(sorted(set(missing)))

"""Write the authorization table of docs/SECURITY.md (between its markers) from broker/server/authorization.py's
RULES: `python scripts/authorization_docs.py`. tests/unit/test_authorization.py fails while the two differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker.server.authorization import authorization_table_markdown  # noqa: E402

DOC = ROOT / "docs" / "SECURITY.md"
SECTION = re.compile(r"(<!-- authorization-table -->\n)(.*?)(<!-- /authorization-table -->)", re.S)


def main() -> int:
    text = DOC.read_text()
    if not SECTION.search(text):
        print(f"{DOC}: no <!-- authorization-table --> markers", file=sys.stderr)
        return 1
    DOC.write_text(SECTION.sub(lambda m: m.group(1) + authorization_table_markdown() + m.group(3), text))
    return 0


if __name__ == "__main__":
    sys.exit(main())

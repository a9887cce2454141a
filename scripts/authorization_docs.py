"""Write the authorization table of docs/SECURITY.md from broker/authorization.py's RULES, or --check it.

python scripts/authorization_docs.py          # rewrite the table between its markers
python scripts/authorization_docs.py --check  # exit 1 if the file differs from what RULES say
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker.authorization import authorization_table_markdown  # noqa: E402

DOC = ROOT / "docs" / "SECURITY.md"
SECTION = re.compile(r"(<!-- authorization-table -->\n)(.*?)(<!-- /authorization-table -->)", re.S)


def main() -> int:
    text = DOC.read_text()
    if not SECTION.search(text):
        print(f"{DOC}: no <!-- authorization-table --> markers", file=sys.stderr)
        return 1
    new = SECTION.sub(lambda m: m.group(1) + authorization_table_markdown() + m.group(3), text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{DOC} is out of date: run python scripts/authorization_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

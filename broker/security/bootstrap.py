"""The first credentials of a new cluster, as `kafka-storage.sh format --add-scram` writes them.

`kl-broker start --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]'` on an empty data directory
stores the credential (salted, never the password) in `<log.dir>/bootstrap.records`; the first controller
commits those records together with the cluster's first record, so the admin can log in to a cluster
that has no other user yet. On a data directory already in use the flag is ignored with a warning: from
then on users are managed with `kl-configs --entity-type users`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from broker.log.checkpoint import atomic_write
from broker.security.scram import make_credential, parse_scram_config

BOOTSTRAP_FILE = "bootstrap.records"


def scram_records(specs: list[str]) -> list[dict[str, Any]]:
    """Records for --add-scram specs; a malformed one raises ValueError naming it."""
    records = []
    for spec in specs:
        mech, name, password, iterations = parse_scram_config(spec, need_name=True)
        records.append(make_credential(mech, password, iterations).to_record(str(name)))
    return records


def format_bootstrap(log_dir: Path, specs: list[str]) -> bool:
    """Write the bootstrap records into an empty `log_dir`. False when it is in use (left as it is)."""
    records = scram_records(specs)  # validate even when ignored: a typo must not pass unnoticed
    if log_dir.exists() and any(p for p in log_dir.iterdir() if not p.name.startswith(".")):
        return False
    log_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(log_dir / BOOTSTRAP_FILE, json.dumps(records))
    return True


def read_bootstrap(log_dir: Path) -> list[dict[str, Any]]:
    path = log_dir / BOOTSTRAP_FILE
    return json.loads(path.read_text()) if path.exists() else []

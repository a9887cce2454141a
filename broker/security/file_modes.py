"""Who may read the broker's files: its data directories hold the SCRAM credentials (salt, StoredKey,
ServerKey in `bootstrap.records` and the metadata log), which let anyone who reads them attempt offline
guessing and impersonate the broker to clients (ServerKey).

As PostgreSQL does (`umask(PG_MODE_MASK_OWNER)`, and its refusal to start on a data directory others can
read), the broker process creates everything owner-only, whatever the umask it was started with: directories
0700 and files 0600, or 0750/0640 with `log.dirs.group.readable=true` (a Spark worker in the broker's group
reading segments). A data directory that every user can reach and that holds SCRAM material is refused at
start; one without (an open cluster's) is tightened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from broker.security.bootstrap import BOOTSTRAP_FILE
from net.errors import KafkaLiteError

# What marks SCRAM material in bootstrap.records (JSON) and in the metadata log's records (msgpack).
SCRAM_MARK = b"user_scram_credential"
METADATA_DIR = "__cluster_metadata-0"


class DataDirExposed(KafkaLiteError):
    """A data directory others can read holds credentials: the broker does not start on it."""


def process_umask(group_readable: bool) -> int:
    """The umask the broker runs with (the new files' modes follow from it)."""
    return 0o027 if group_readable else 0o077


def dir_mode(group_readable: bool) -> int:
    return 0o750 if group_readable else 0o700


def holds_scram(log_dir: Path) -> bool:
    """Whether `log_dir` holds SCRAM credentials: in its bootstrap records or its metadata log."""
    candidates = [log_dir / BOOTSTRAP_FILE, *sorted((log_dir / METADATA_DIR).glob("*.log"))]
    for path in candidates:
        try:
            with open(path, "rb") as f:
                tail = b""  # the mark may straddle two reads
                while chunk := f.read(1 << 20):
                    if SCRAM_MARK in tail + chunk:
                        return True
                    tail = chunk[-len(SCRAM_MARK) :]
        except OSError:
            continue
    return False


def secure_log_dirs(log_dirs: list[Path], group_readable: bool) -> list[Path]:
    """Create the data directories with the broker's mode, tighten ones without credentials that others can
    reach, and raise DataDirExposed for one that others can reach and that holds credentials. Returns the
    directories whose mode was tightened."""
    wanted = dir_mode(group_readable)
    tightened = []
    for d in log_dirs:
        if not d.exists():
            d.mkdir(parents=True, mode=wanted)
            os.chmod(d, wanted)  # mkdir's mode goes through the umask of whoever started us
            continue
        mode = stat.S_IMODE(d.stat().st_mode)
        if mode & 0o007 and holds_scram(d):
            raise DataDirExposed(
                f"data directory {d} holds SCRAM credentials and every user may open it (mode {mode:04o}): "
                f"run chmod {wanted:o} {d} (log.dirs.group.readable=true allows 750)"
            )
        if mode & ~wanted:
            os.chmod(d, mode & wanted)
            tightened.append(d)
    return tightened

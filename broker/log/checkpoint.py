"""Kafka's plain-text checkpoint files.

Offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`)::

    0                     <- format version
    2                     <- number of entries
    orders 0 1500         <- topic partition offset
    orders 1 1432

The leader-epoch checkpoint (`leader-epoch-checkpoint`) has the same framing
with "epoch startOffset" lines.

A malformed file raises `CorruptCheckpointError` rather than silently reading
as empty: only the caller knows whether "empty" is a safe fallback. The
LogManager decides that for the recovery point (empty -> recover everything,
which is slow but safe) and logs a warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from net.errors import KafkaStorageError

VERSION = 0
T = TypeVar("T")


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file that cannot be parsed."""


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write tmp, fsync, rename over `path`, fsync the directory: a crash leaves the old or the new file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _read(path: Path, parse: Callable[[list[str]], T], fields: int) -> list[T] | None:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: malformed header") from None
    if version != VERSION:
        raise CorruptCheckpointError(f"{path}: unknown checkpoint version {version}")
    body = [ln for ln in lines[2:] if ln.strip()]
    if len(body) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(body)}")
    out = []
    for n, line in enumerate(body, 3):
        parts = line.split()
        if len(parts) != fields:
            raise CorruptCheckpointError(f"{path}:{n}: malformed line {line!r}")
        try:
            out.append(parse(parts))
        except ValueError:
            raise CorruptCheckpointError(f"{path}:{n}: malformed line {line!r}") from None
    return out


def _write(path: Path, lines: list[str]) -> None:
    atomic_write(path, "".join(f"{ln}\n" for ln in [str(VERSION), str(len(lines)), *lines]))


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; {} if the file does not exist. Raises CorruptCheckpointError."""
    entries = _read(path, lambda p: ((p[0], int(p[1])), int(p[2])), 3)
    return dict(entries or ())


def write_checkpoint(path: Path, mapping: dict[tuple[str, int], int]) -> None:
    _write(path, [f"{t} {p} {o}" for (t, p), o in sorted(mapping.items())])


class LeaderEpochCheckpoint:
    """The `leader-epoch-checkpoint` file of one partition: (epoch, start offset) entries."""

    FILE_NAME = "leader-epoch-checkpoint"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> list[tuple[int, int]]:
        return _read(self.path, lambda p: (int(p[0]), int(p[1])), 2) or []

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        _write(self.path, [f"{e} {o}" for e, o in entries])

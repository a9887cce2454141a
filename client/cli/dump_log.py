"""kl-dump-log: Kafka's kafka-dump-log.sh on a broker's segment files, same flags and output.

    kl-dump-log --files DIR/00000000000000000000.log[,...] [--print-data-log] [--deep-iteration]
                [--skip-record-metadata]

For a `.log`: each batch's header line as Kafka prints it (offsets, producer, epoch, flags, position, time,
size, magic, codec, CRC and whether it is valid), and with --deep-iteration or --print-data-log a `|` line per
record (its offset, time, sizes, sequence and header keys, a transaction marker's type and coordinator epoch; with
--print-data-log its key and payload, as UTF-8). For a `.index` / `.timeindex`: its entries (docs/FORMAT.md §2, §3).
It reads the files only: a running broker's active segment may end with a batch being written.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

import click

from client.cli.common import one_line_errors
from net import batch as fmt
from net.compression import CODECS
from net.version import version_option

CODEC_NAMES = {v: k for k, v in CODECS.items()}
_INDEX = struct.Struct(">II")  # relative offset, position
_TIME_INDEX = struct.Struct(">qI")  # timestamp, relative offset


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")  # as Kafka's default decoder prints bytes that are not UTF-8


def dump_segment(path: Path, data: bytes, deep: bool, print_data: bool, skip_metadata: bool) -> Iterator[str]:
    base = int(path.stem) if path.stem.isdigit() else 0
    yield f"Log starting offset: {base}"
    end = 0  # after the last whole batch
    batches = fmt.iter_batches(data)
    while True:
        try:
            pos, h = next(batches)
        except StopIteration:
            break
        except fmt.InvalidBatch:  # a length that cannot be a batch's: what follows is not readable
            break
        end = pos + h.size
        valid = True
        try:
            fmt.validate(data, pos)
        except fmt.InvalidBatch:
            valid = False
        seq = h.base_sequence
        time_type = "LogAppendTime" if h.attributes & fmt.TIMESTAMP_LOG_APPEND else "CreateTime"
        horizon = h.delete_horizon_ms
        yield (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {seq} lastSequence: {seq + h.last_offset_delta if seq >= 0 else -1} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.leader_epoch} isTransactional: {str(h.is_transactional).lower()} "
            f"isControl: {str(h.is_control).lower()} deleteHorizonMs: "
            f"{'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'} position: {pos} "
            f"{time_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {CODEC_NAMES.get(h.codec, str(h.codec))} crc: {h.crc} isvalid: {str(valid).lower()}"
        )
        if not (deep or print_data) or not valid:
            continue
        marker = fmt.control_record(data, pos, h) if h.is_control else None
        for delta, ts_delta, key, value, headers in fmt.records_of(data, pos, h):
            # A LogAppendTime batch's records carry the broker's append time, as Kafka reads them.
            ts = h.max_timestamp if time_type == "LogAppendTime" else h.first_timestamp + ts_delta
            line = "|"
            if not skip_metadata:
                line += (
                    f" offset: {h.base_offset + delta} {time_type}: {ts} "
                    f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)} "
                    f"sequence: {seq + delta if seq >= 0 else -1} headerKeys: [{','.join(k for k, _ in headers or ())}]"
                )
                if marker is not None:
                    line += f" endTxnMarker: {'COMMIT' if marker.commit else 'ABORT'}"
                    line += f" coordinatorEpoch: {marker.coordinator_epoch}"
            if print_data and not h.is_control:
                line += (f" key: {_text(key)}" if key is not None else "") + (
                    f" payload: {_text(value)}" if value is not None else ""
                )
            yield line
    if end < len(data):
        yield f"Found {len(data) - end} invalid bytes at the end of {path.name}"


def dump_index(path: Path, data: bytes) -> Iterator[str]:
    base = int(path.stem) if path.stem.isdigit() else 0
    whole = len(data) - len(data) % _INDEX.size
    for rel, position in _INDEX.iter_unpack(data[:whole]):
        yield f"offset: {base + rel} position: {position}"


def dump_time_index(path: Path, data: bytes) -> Iterator[str]:
    base = int(path.stem) if path.stem.isdigit() else 0
    whole = len(data) - len(data) % _TIME_INDEX.size
    for ts, rel in _TIME_INDEX.iter_unpack(data[:whole]):
        yield f"timestamp: {ts} offset: {base + rel}"


@click.command()
@version_option()
@click.option("--files", required=True, metavar="F1,F2", help="Comma-separated .log, .index and .timeindex files.")
@click.option("--print-data-log", is_flag=True, help="Print each record's key and payload (implies --deep-iteration).")
@click.option("--deep-iteration", is_flag=True, help="A line per record, not only per batch.")
@click.option("--skip-record-metadata", is_flag=True, help="Leave out each record's metadata (not the batch line).")
@one_line_errors
def main(files: str, print_data_log: bool, deep_iteration: bool, skip_record_metadata: bool) -> None:
    """Dump segment and index files, as kafka-dump-log.sh does."""
    for name in (f.strip() for f in files.split(",") if f.strip()):
        path = Path(name)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise click.ClickException(f"{name}: {e.strerror or e}") from None
        click.echo(f"Dumping {path}")
        if path.suffix == ".log":
            lines = dump_segment(path, data, deep_iteration, print_data_log, skip_record_metadata)
        elif path.suffix == ".index":
            lines = dump_index(path, data)
        elif path.suffix == ".timeindex":
            lines = dump_time_index(path, data)
        else:
            click.echo(f"Ignoring unknown file {path}", err=True)
            continue
        try:
            for line in lines:
                click.echo(line)
        except (fmt.InvalidBatch, ValueError, struct.error) as e:
            raise click.ClickException(f"{path}: not a readable segment: {e}") from None


if __name__ == "__main__":
    main()

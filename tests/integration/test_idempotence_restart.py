"""Idempotence survives restarts: a retried batch whose producer wrote its last batch many segments ago is
still answered with its first offset after SIGKILL and after a clean restart (issue: the producer state was
rebuilt from the newest two segments only, so the retry was appended a second time)."""

from __future__ import annotations

import pytest

from broker.replica.producer_state import snapshot_offsets
from net import batch as batch_fmt
from net.protocol import ApiKey
from tests.integration.test_protocol_errors import RawClient, make_topic

pytestmark = pytest.mark.timeout(90)

PID, EPOCH = 4242, 0


def produce(port: int, blob: bytes) -> tuple[int, int]:
    c = RawClient(port)
    try:
        row = c.request(ApiKey.PRODUCE, {"acks": 1, "topics": [["idem", [[0, blob]]]]})["topics"][0][1][0]
    finally:
        c.close()
    return row[1], row[2]  # error code, base offset


def log_end(port: int) -> int:
    c = RawClient(port)
    try:
        body = c.request(ApiKey.LIST_OFFSETS, {"topics": [["idem", [[0, -1]]]]})
    finally:
        c.close()
    return body["topics"][0][1][0][3]


def test_retry_after_restart_is_still_a_duplicate(broker):
    make_topic(broker.bootstrap, "idem", 1, **{"segment.bytes": "1024"})
    first = batch_fmt.build(
        [[0, 0, b"k", b"only-once", None]], 1, 1, producer_id=PID, producer_epoch=EPOCH, base_sequence=0
    )
    err, offset = produce(broker.port, first)
    assert err == 0
    # Other writers fill several segments after it (each ~700-byte batch rolls a 1 KiB segment).
    for i in range(8):
        err, _ = produce(broker.port, batch_fmt.build([[0, 0, None, b"x" * 700, None]], 2, 2))
        assert err == 0, i
    pdir = broker.data_dir / "idem-0"
    assert len(list(pdir.glob("*.log"))) >= 8
    end = log_end(broker.port)
    assert produce(broker.port, first) == (0, offset)  # de-duplicated while running

    broker.kill()  # SIGKILL: no shutdown snapshot; the ones taken at each roll must do
    broker.start()
    assert produce(broker.port, first) == (0, offset), "retry appended again after SIGKILL"
    assert log_end(broker.port) == end

    broker.stop()  # clean: a snapshot at the log end
    assert snapshot_offsets(pdir)[-1] == end
    broker.start()
    assert produce(broker.port, first) == (0, offset), "retry appended again after a clean restart"
    assert log_end(broker.port) == end
    # The next sequence is still accepted, and an old one that is not retained is refused, not appended.
    nxt = batch_fmt.build([[0, 0, b"k", b"second", None]], 3, 3, producer_id=PID, producer_epoch=EPOCH, base_sequence=1)
    assert produce(broker.port, nxt) == (0, end)

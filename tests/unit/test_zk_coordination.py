"""The ZooKeeper mode's pure parts: zookeeper.connect parsing, the metadata-log znode encoding and
offsets, and the liveness rules of both modes (election/coordination.py)."""

from __future__ import annotations

import pytest

from broker.controller.zk_coordination import (
    decode_proposal,
    encode_proposal,
    new_log_entries,
    parse_connect,
    proposal_token,
    seq_of,
)
from election.coordination import fetch_liveness_expiry, registration_expiry


def test_parse_connect_default_and_explicit_chroot():
    assert parse_connect("127.0.0.1:2181") == ("127.0.0.1:2181", "/kafkalite")
    assert parse_connect("a:1,b:2/kl/test/") == ("a:1,b:2", "/kl/test")
    for bad in ("", "host", "host:port", ":2181", "h:0", "h:70000/x"):
        with pytest.raises(ValueError):
            parse_connect(bad)


def test_log_entries_offsets_run_over_znodes_in_order():
    recs = [{"type": "topic", "name": "t"}, {"type": "partition", "topic": "t", "partition": 0}]
    z = [(3, encode_proposal(1, recs)), (7, encode_proposal(2, [{"type": "cluster", "cluster_id": "c"}]))]
    entries, last_of, nxt = new_log_entries(10, z)
    assert [(o, e) for o, e, _ in entries] == [(10, 1), (11, 1), (12, 2)]
    assert entries[1][2] == recs[1]
    assert last_of == {3: 11, 7: 12} and nxt == 13
    assert decode_proposal(encode_proposal(5, [])) == (5, [])
    assert seq_of("r-0000000042") == 42
    # the proposer's token (to find its own znode after a connection loss) is invisible to readers
    assert decode_proposal(encode_proposal(5, recs, "t0k")) == (5, recs)
    assert proposal_token(encode_proposal(5, recs, "t0k")) == "t0k" and proposal_token(encode_proposal(5, [])) is None


def test_registration_expiry_zookeeper_rule():
    assert registration_expiry(True, 1000, 2000) is None  # znode present: alive
    assert registration_expiry(False, None, 2000) is None  # we are disconnected: cannot tell, nobody expires
    assert registration_expiry(False, 1000, 2000) == 3000  # missing: dead after a grace from our (re)connect


def test_fetch_liveness_expiry_custom_rule():
    assert fetch_liveness_expiry(500, False, 0, 2000) == 2500
    assert fetch_liveness_expiry(None, True, 100, 2000) == 2100
    assert fetch_liveness_expiry(None, False, 100, 2000) == 100  # took no part in our election: dead now

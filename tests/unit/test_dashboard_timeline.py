"""The console's timeline: events derived from two metadata snapshots (client/dashboard/timeline.py)."""

from client.dashboard.timeline import ClusterView, diff


def view(up, controller, epoch, parts) -> ClusterView:
    return ClusterView(frozenset(up), controller, epoch, parts)


def test_first_view_has_no_events():
    assert diff(None, view({1, 2, 3}, 1, 1, {("t", 0): (1, 0, (1, 2, 3))})) == []


def test_broker_death_election_leader_change_and_isr_shrink():
    before = view({1, 2, 3}, 1, 1, {("t", 0): (1, 0, (1, 2, 3)), ("t", 1): (2, 0, (2, 3, 1))})
    after = view({2, 3}, 2, 2, {("t", 0): (2, 1, (2, 3)), ("t", 1): (2, 0, (2, 3))})
    events = diff(before, after)
    assert events == [
        ("broker", "broker 1 down"),
        ("election", "controller election: broker 2 (epoch 2)"),
        ("leader", "t-0: leader 1 → broker 2 (epoch 1)"),
        ("isr", "t-0: ISR shrink [1, 2, 3] → [2, 3] (removed [1])"),
        ("isr", "t-1: ISR shrink [2, 3, 1] → [2, 3] (removed [1])"),
    ]


def test_return_expands_isr_and_internal_topics_are_summarized():
    before = view(
        {2, 3},
        2,
        2,
        {("t", 0): (2, 1, (2, 3)), ("__consumer_offsets", 0): (2, 1, (2, 3)), ("__consumer_offsets", 1): (3, 1, (3,))},
    )
    after = view(
        {1, 2, 3},
        2,
        2,
        {
            ("t", 0): (2, 1, (2, 3, 1)),
            ("__consumer_offsets", 0): (2, 1, (2, 3, 1)),
            ("__consumer_offsets", 1): (3, 1, (3, 1)),
        },
    )
    assert diff(before, after) == [
        ("broker", "broker 1 up"),
        ("isr", "t-0: ISR expand [2, 3] → [2, 3, 1] (added [1])"),
        ("isr", "__consumer_offsets: 2 partitions: ISR expands"),
    ]


def test_partition_going_offline():
    before = view({1, 2}, 1, 1, {("t", 0): (2, 3, (2,))})
    after = view({1}, 1, 1, {("t", 0): (-1, 4, (2,))})
    assert ("leader", "t-0: leader 2 → none (offline) (epoch 4)") in diff(before, after)


def test_the_console_is_a_client_it_never_imports_the_broker():
    import ast
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[2] / "client" / "dashboard"
    imported = set()
    for path in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
    assert "broker" not in imported and "election" not in imported
    assert {"client", "net", "aiohttp"} <= imported

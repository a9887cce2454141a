"""tests/module_order.py: the suite's modules handed to xdist longest first, each module's tests kept together
and in their own order."""

from __future__ import annotations

from types import SimpleNamespace

from tests.module_order import MODULE_SECONDS, estimate, longest_first


def items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_longest_module_first_and_each_module_kept_in_order():
    slow = max(MODULE_SECONDS, key=MODULE_SECONDS.__getitem__)
    given = items(
        "tests/unit/test_a.py::test_1",
        f"{slow}::test_x[custom]",
        "tests/integration/test_b.py::test_1",
        "tests/unit/test_a.py::test_2",
        f"{slow}::test_x[zookeeper]",
        "tests/integration/test_b.py::test_2",
    )
    assert [i.nodeid for i in longest_first(given)] == [
        f"{slow}::test_x[custom]",
        f"{slow}::test_x[zookeeper]",
        "tests/integration/test_b.py::test_1",
        "tests/integration/test_b.py::test_2",
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_a.py::test_2",
    ]


def test_a_module_not_in_the_table_is_estimated_from_its_tests():
    # integration tests start brokers: seconds each; unit tests mostly do not
    assert estimate("tests/integration/test_new.py", 10) > estimate("tests/unit/test_new.py", 10) > 0
    assert estimate("tests/integration/test_new.py", 20) > estimate("tests/integration/test_new.py", 10)

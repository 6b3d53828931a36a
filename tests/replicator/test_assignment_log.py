"""A first start logs the partitions it starts without a committed offset in one line, not one
line each (6,000 lines at 6,000 partitions, issue 34)."""

from replicator.assignment import _named


def test_the_partitions_without_a_committed_offset_are_named_by_topic_in_one_line():
    assert _named({"orders": [2, 0, 1], "audit": [0]}) == "audit[0] orders[0,1,2]"


def test_past_ten_topics_the_line_says_how_many_more():
    line = _named({f"t{i:02d}": [0] for i in range(12)})
    assert line.endswith("t09[0] and 2 more topics")
    assert "t10" not in line

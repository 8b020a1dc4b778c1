"""hostside/pull/ranges.py: how a file is cut into ranges and what a partial holds after a kill."""

from __future__ import annotations

import pytest

from sglang_infra.hostside.pull import ranges

MiB = 1 << 20


def covers(spans: list[list[int]], size: int) -> bool:
    return spans[0][0] == 0 and spans[-1][1] == size and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("size, workers, count", [
    (0, 8, 1), (300_000, 8, 1), (2 * MiB - 1, 8, 1),      # below two RANGE_MIN: one stream
    (2 * MiB, 8, 2), (3 * MiB, 8, 3), (12 * MiB, 8, 8),    # one range per MiB, up to the workers
    (32 * MiB, 8, 8), (12 * MiB, 1, 1), (12 * MiB, 3, 3),
    (20 * ranges.RANGE_MAX, 8, 20),                         # no range above RANGE_MAX
])
def test_plan_cuts_a_file_into_at_most_one_range_per_worker(size, workers, count):
    spans = ranges.plan(size, workers)
    assert len(spans) == count and covers(spans, size) and ranges.missing(spans) == size
    assert all(end - start <= ranges.RANGE_MAX for start, end, _ in spans)


def test_a_prefix_on_disk_is_one_done_range_and_the_rest_is_split():
    spans = ranges.plan(12 * MiB, 8, 5_000_000)
    assert spans[0] == [0, 5_000_000, 5_000_000] and covers(spans, 12 * MiB)
    assert len(spans) == 8 and ranges.missing(spans) == 12 * MiB - 5_000_000
    assert ranges.plan(300_000, 8, 1000) == [[0, 300_000, 1000]]  # a small file stays one stream


def test_resume_reads_the_sidecar():
    spans = [[0, MiB, 10], [MiB, 2 * MiB, MiB], [2 * MiB, 3 * MiB, 0]]
    note = ranges.document(spans, 3 * MiB)
    assert ranges.resume(3 * MiB, 3 * MiB, note, 8) == spans
    assert ranges.resume(3 * MiB, 3 * MiB, note, 1) == spans  # its plan, whatever the workers now


def test_a_count_line_is_rewritten_in_place():
    spans = ranges.plan(3 * MiB, 8)
    note = bytearray(ranges.document(spans, 3 * MiB))
    at = ranges.count_offset(spans, 3 * MiB, 1)
    note[at:at + ranges.SLOT] = ranges.count_line(123_456)
    assert ranges.parse(bytes(note), 3 * MiB)[1] == [MiB, 2 * MiB, 123_456]
    assert len(note) == len(ranges.document(spans, 3 * MiB))


def test_the_sidecar_never_claims_more_than_the_partial_holds():
    """Killed after the sidecar was written but before the partial was grown to its full length."""
    spans = [[0, MiB, MiB], [MiB, 2 * MiB, 500], [2 * MiB, 3 * MiB, 0]]
    assert ranges.resume(3 * MiB, MiB + 200, ranges.document(spans, 3 * MiB), 8) == [
        [0, MiB, MiB], [MiB, 2 * MiB, 200], [2 * MiB, 3 * MiB, 0]]


COUNT = "0" * 20


@pytest.mark.parametrize("note", [
    "not json", '{"size": 100}', '{"size": 3145728, "ranges": []}', b"\xff\xfe",
    '{"size": 999, "ranges": [[0, 999]]}\n' + COUNT,                                       # another size
    '{"size": 3145728, "ranges": [[0, 1048576], [1048577, 3145728]]}\n' + COUNT + "\n" + COUNT,   # a gap
    '{"size": 3145728, "ranges": [[0, 2097152], [1048576, 3145728]]}\n' + COUNT + "\n" + COUNT,   # an overlap
    '{"size": 3145728, "ranges": [[0, 3145728]]}\n' + "9" * 20,                             # more than the range
    '{"size": 3145728, "ranges": [[0, 3145728]]}\n' + "-" + "0" * 19,
    '{"size": 3145728, "ranges": [[0, 3145728]]}\n' + "12",                                # a torn count line
    '{"size": 3145728, "ranges": [[0, 1048576], [1048576, 3145728]]}\n' + COUNT,           # a count missing
])
def test_a_sidecar_that_is_not_one_leaves_the_partial_a_prefix(note):
    assert ranges.parse(note, 3 * MiB) is None
    assert ranges.resume(3 * MiB, 700_000, note, 8) == ranges.plan(3 * MiB, 8, 700_000)


def test_no_sidecar_means_a_prefix_and_too_long_a_partial_counts_for_nothing_past_the_size():
    assert ranges.resume(3 * MiB, 700_000, None, 8) == ranges.plan(3 * MiB, 8, 700_000)
    assert ranges.missing(ranges.resume(3 * MiB, 3 * MiB, None, 8)) == 0  # a complete partial: verify only


@pytest.mark.parametrize("start, end, size, header", [
    (0, 100, 100, None), (40, 100, 100, "bytes=40-"), (0, 50, 100, "bytes=0-49"), (10, 50, 100, "bytes=10-49"),
])
def test_range_headers(start, end, size, header):
    assert ranges.header(start, end, size) == header

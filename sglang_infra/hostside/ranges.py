"""Which byte ranges of one blob a pull fetches, and which of them are on disk.

A file of at least two RANGE_MIN is fetched as several ranges over several
connections (one connection is throttled by the Hub or its CDN; a link is
not), each range written at its own offset into the one partial
`blobs/<etag>.incomplete`. What each range holds so far is kept in a small
sidecar, `<etag>.incomplete.ranges`, replaced atomically, so a killed pull
resumes every range where its last record left it. A range is written front
to back, so one number per range, its bytes done, says what it holds.

A partial with no sidecar is a prefix: huggingface_hub's own temp files, a
pull before ranges, or a small file fetched as one range (those never get a
sidecar). A sidecar never claims more than the partial's length: it is
written before the partial is grown to its full size, and its counts are
clipped to that length when read.

Plain data (lists of [start, end, done]) in, plain data out: the pull does
the I/O, this module only decides.
"""

import json

RANGE_MIN = 1 << 20      # the smallest range worth a request of its own; a file of two or more is split
RANGE_MAX = 1 << 30      # the largest: a slow connection on a huge file holds back at most this much
RANGE_ALIGN = 64 << 10   # range lengths are multiples of this
SIDECAR = ".ranges"      # appended to the partial's name
MAX_SIDECAR_BYTES = 1 << 20


def plan(size, workers, have=0):
    """[start, end, done] ranges covering ``size`` bytes of which the first
    ``have`` are on disk: what is missing split over up to ``workers``
    connections (more for a file above workers * RANGE_MAX), or one range
    when it is below two RANGE_MIN."""
    rest = size - have
    count = 1
    if workers > 1 and rest >= 2 * RANGE_MIN:
        count = max(min(workers, rest // RANGE_MIN), -(-rest // RANGE_MAX))
    if count == 1:
        return [[0, size, have]]
    step = -(-(-(-rest // count)) // RANGE_ALIGN) * RANGE_ALIGN
    head = [[0, have, have]] if have else []
    return head + [[start, min(start + step, size), 0] for start in range(have, size, step)]


def clip(ranges, length):
    """The ranges with each one's done count cut to what a file of ``length``
    bytes can hold."""
    return [[start, end, max(0, min(done, end - start, length - start))] for start, end, done in ranges]


def prefix(ranges, have):
    """The ranges with the first ``have`` bytes counted done."""
    return [[start, end, max(done, min(end - start, have - start))] for start, end, done in ranges]


def parse(text, size):
    """The ranges of a sidecar's text for a blob of ``size`` bytes, or None
    when it is not one (unreadable, another size, gaps or overlaps)."""
    try:
        data = json.loads(text)
        ranges = [[int(v) for v in r] for r in data["ranges"]]
        if data["size"] != size or not ranges or any(len(r) != 3 for r in ranges):
            return None
    except (ValueError, TypeError, KeyError):
        return None
    at = 0
    for start, end, done in ranges:
        if start != at or end < start or not 0 <= done <= end - start:
            return None
        at = end
    return ranges if at == size else None


def document(ranges, size):
    """A sidecar's text."""
    return json.dumps({"size": size, "ranges": ranges}, separators=(",", ":")) + "\n"


def resume(size, length, sidecar_text, workers):
    """What to fetch of a blob of ``size`` bytes whose partial is ``length``
    bytes long: the sidecar's ranges when it has a valid one, else a fresh
    plan with the partial counted as a prefix."""
    ranges = parse(sidecar_text, size) if sidecar_text is not None else None
    if ranges is None:
        return plan(size, workers, min(length, size))
    return clip(ranges, length)


def done(ranges):
    return sum(r[2] for r in ranges)


def missing(ranges):
    return sum(end - start - d for start, end, d in ranges)


def header(start, end, size):
    """The Range header for bytes [start, end) of a file of ``size`` bytes,
    or None for the whole file. Open-ended when it runs to the end, as a
    resume of a single stream asks."""
    if start == 0 and end == size:
        return None
    return f"bytes={start}-" if end == size else f"bytes={start}-{end - 1}"

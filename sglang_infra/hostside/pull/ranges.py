"""Which byte ranges of one blob a pull fetches, and which of them are on disk.

A file of at least two RANGE_MIN is fetched as several ranges over several
connections (one connection is throttled by the Hub or its CDN; a link is
not), each range written at its own offset into the one partial
`blobs/<etag>.incomplete`. What each range holds so far is kept in a small
sidecar, `<etag>.incomplete.ranges`, so a killed pull resumes every range
where it stopped. A range is written front to back, so one number per range,
its bytes done, says what it holds.

The sidecar is the plan (one JSON line: the size and each range's start and
end), written atomically (a new file renamed over the name) when the ranges
are planned, then one fixed-width line per range holding its bytes done,
rewritten in place by a single small pwrite after every chunk of data the
range writes: a kill loses at most the chunk being written, never a count
ahead of its data. (After a power cut a count may be ahead of data that never
reached the disk; the hash check then fails and the file is fetched again
from byte 0, as any bad partial is.)

A partial with no sidecar is a prefix: huggingface_hub's own temp files, a
pull before ranges, or a small file fetched as one range (those never get a
sidecar). A sidecar never claims more than the partial's length: it is
written before the partial is grown to its full size, and its counts are
clipped to that length when read.

Plain data (lists of [start, end, done]) in, plain data out: the pull does
the I/O, this module only decides and formats.
"""

import json

RANGE_MIN = 1 << 20      # the smallest range worth a request of its own; a file of two or more is split
RANGE_MAX = 1 << 30      # the largest: a slow connection on a huge file holds back at most this much
RANGE_ALIGN = 64 << 10   # range lengths are multiples of this
SIDECAR = ".ranges"      # appended to the partial's name
SLOT = 21                # bytes of one count line: 20 digits and a newline
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
    """The ranges a sidecar's text records for a blob of ``size`` bytes, or
    None when it is not one (unreadable, another size, gaps or overlaps)."""
    try:
        lines = (text.decode() if isinstance(text, bytes) else text).split("\n")
        data = json.loads(lines[0])
        bounds = [[int(v) for v in r] for r in data["ranges"]]
        counts = lines[1:1 + len(bounds)]
        if data["size"] != size or not bounds or any(len(r) != 2 for r in bounds) or len(counts) != len(bounds) \
                or any(len(c) != SLOT - 1 or not c.isdigit() for c in counts):
            return None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    ranges = [[start, end, int(count)] for (start, end), count in zip(bounds, counts)]
    at = 0
    for start, end, done in ranges:
        if start != at or end < start or not 0 <= done <= end - start:
            return None
        at = end
    return ranges if at == size else None


def plan_line(ranges, size):
    """The sidecar's first line: the size and every range's bounds."""
    return (json.dumps({"size": size, "ranges": [[start, end] for start, end, _ in ranges]},
                       separators=(",", ":")) + "\n").encode()


def count_line(done):
    """One range's fixed-width line of bytes done (SLOT bytes)."""
    return b"%0*d\n" % (SLOT - 1, done)


def document(ranges, size):
    """A whole sidecar: the plan line, then a count line per range."""
    return plan_line(ranges, size) + b"".join(count_line(done) for _, _, done in ranges)


def count_offset(ranges, size, k):
    """Where range k's count line starts in the sidecar."""
    return len(plan_line(ranges, size)) + SLOT * k


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

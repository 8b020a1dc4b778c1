"""scripts/lanes.py: test modules in two lanes of about equal time, and one closing line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("lanes", ROOT / "scripts" / "lanes.py")
lanes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lanes)


def test_the_longest_modules_are_spread_over_the_lanes_first():
    seconds = {f"tests/e2e/test_{m}.py": t for m, t in (("a", 300), ("b", 280), ("c", 100), ("d", 90), ("e", 10))}
    groups = lanes.balanced(list(seconds), 2, seconds)
    totals = sorted(sum(seconds[m] for m in group) for group in groups)
    assert totals == [390, 390]
    assert sorted(m for group in groups for m in group) == sorted(seconds)


def test_an_unmeasured_module_counts_as_the_median_and_one_module_makes_one_lane():
    measured = {"tests/e2e/test_a.py": 50, "tests/e2e/test_b.py": 70}
    groups = lanes.balanced(["tests/e2e/test_new.py", "tests/e2e/test_a.py"], 2, measured)
    assert len(groups) == 2
    assert lanes.balanced(["tests/e2e/test_only.py"], 2, {}) == [["tests/e2e/test_only.py"]]


def test_the_closing_line_counts_are_read_from_the_last_summary():
    text = "tests/e2e/test_x.py ..F\n=== 2 passed, 1 failed, 3 skipped in 12.50s ===\n"
    assert lanes.counts(text) == {"passed": 2, "failed": 1, "skipped": 3}
    assert lanes.counts("=== 1 error in 0.2s ===") == {"errors": 1}
    assert lanes.counts("no tests ran in 0.01s") == {}

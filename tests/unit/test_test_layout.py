"""The test tree itself: pytest imports tests/unit/ and tests/host_checks/ into one namespace (rootdir-relative
basenames, no packages; tests/e2e/ is a package only so that its conftest keeps its own name), so two test files
with one basename fail collection in a fresh checkout ("import file mismatch") while each passes when run alone."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_files_share_a_basename():
    names = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}

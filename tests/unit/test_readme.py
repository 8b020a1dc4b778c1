"""The README a newcomer pastes from: every file and script it names exists, and pyinfra is always called the
one way that works after the set-up."""

from __future__ import annotations

import re

import pytest

from harness import PROJECT_DIR

README = (PROJECT_DIR / "README.md").read_text()
TOP = ("scripts/", "tasks/", "templates/", "sglang_infra/", "tests/", "bench/", "group_data/", ".ci/")
# What the benchmark writes (bench/results/) exists only after it ran.
NAMED = sorted({m for m in re.findall(r"`\.?/?((?:%s)[\w./-]*)`" % "|".join(map(re.escape, TOP)), README)
                if not m.startswith("bench/results/")})


def test_the_readme_names_files():
    assert len(NAMED) > 30


@pytest.mark.parametrize("path", NAMED)
def test_every_path_the_readme_names_exists(path):
    assert (PROJECT_DIR / path.rstrip("/")).exists(), f"README.md names {path}, which does not exist"


def test_pyinfra_is_always_called_from_the_venv():
    # The two first commands describe what they run; every other mention is a command to paste.
    bare = [line for line in README.splitlines() if not line.startswith("./scripts/")
            and re.search(r"(^|[`\s])pyinfra (-y |--|inventory|[A-Z])", line) and ".venv/bin/pyinfra" not in line]
    assert bare == []

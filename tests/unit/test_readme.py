"""The README a newcomer pastes from, and the docs/ pages it leads to: every file and script they name exists,
pyinfra is always called the one way that works after the set-up, every docs page is linked from the README,
and every relative link lands on a file (and a heading, when it names one) that exists."""

from __future__ import annotations

import re

import pytest

from harness import PROJECT_DIR

README_PATH = PROJECT_DIR / "README.md"
DOCS_DIR = PROJECT_DIR / "docs"
DOCS = sorted(DOCS_DIR.glob("*.md"))
PAGES = {path.relative_to(PROJECT_DIR).as_posix(): path.read_text() for path in [README_PATH, *DOCS]}
TOP = ("scripts/", "tasks/", "templates/", "sglang_infra/", "tests/", "bench/", "group_data/", ".ci/")
NAMED_RE = r"`\.?/?((?:%s)[\w./-]*)`" % "|".join(map(re.escape, TOP))
# A Markdown link, not an image: [text](target), the target up to the first space or closing parenthesis.
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def named(text: str) -> set[str]:
    # What the benchmark writes (bench/results/) exists only after it ran.
    return {m for m in re.findall(NAMED_RE, text) if not m.startswith("bench/results/")}


NAMED = sorted({(page, path) for page, text in PAGES.items() for path in named(text)})


def relative_links(text: str) -> list[str]:
    return [t for t in LINK_RE.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_\[\]()]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # a '#' line in a code block is no heading
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


LINKS = sorted({(page, target) for page, text in PAGES.items() for target in relative_links(text)})


def test_there_are_docs_pages():
    assert len(DOCS) >= 10


def test_the_pages_name_files():
    assert len(NAMED) > 30
    assert len(named(PAGES["README.md"])) > 10


@pytest.mark.parametrize("page,path", NAMED)
def test_every_path_the_pages_name_exists(page, path):
    assert (PROJECT_DIR / path.rstrip("/")).exists(), f"{page} names {path}, which does not exist"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_pyinfra_is_always_called_from_the_venv(page):
    # The README's two first commands describe what they run; every other mention is a command to paste.
    bare = [line for line in PAGES[page].splitlines() if not line.startswith("./scripts/")
            and re.search(r"(^|[`\s])pyinfra (-y |--|inventory|[A-Z])", line) and ".venv/bin/pyinfra" not in line]
    assert bare == []


def test_the_readme_links_every_docs_page():
    linked = {(README_PATH.parent / t.split("#")[0]).resolve() for t in relative_links(PAGES["README.md"])
              if t.split("#")[0]}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_the_pages_have_relative_links():
    assert len(LINKS) > len(DOCS)


@pytest.mark.parametrize("page,target", LINKS)
def test_every_relative_link_resolves(page, target):
    file_part, _, anchor = target.partition("#")
    dest = (PROJECT_DIR / page).parent / file_part if file_part else PROJECT_DIR / page
    assert dest.exists(), f"{page} links {target}, which does not exist"
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest.read_text()), f"{page} links {target}: no heading #{anchor} there"

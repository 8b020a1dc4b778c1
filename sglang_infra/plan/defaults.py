"""Reads group_data/all.py as documentation: each key, its default, its
section and the reason written in the comment block above it. The reasons are
rendered above each flag in compose.yaml, so they are written only once.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ALL_DEFAULTS = Path(__file__).resolve().parent.parent.parent / "group_data" / "all.py"


@dataclass(frozen=True)
class Default:
    key: str
    default_source: str   # the literal as written
    reason: str
    section: str


def _segment(lines: list[str], node: ast.expr) -> str:
    """The source of ``node`` (ast.get_source_segment splits the whole file again on every call)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1   # ast.parse sets end_lineno
    if first == last:
        return lines[first][node.col_offset:node.end_col_offset]
    return "\n".join([lines[first][node.col_offset:], *lines[first + 1:last], lines[last][:node.end_col_offset]])


@lru_cache(maxsize=None)
def read_defaults(path: Path = ALL_DEFAULTS) -> tuple[Default, ...]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    out = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        reason_lines: list[str] = []
        index = node.lineno - 2
        while index >= 0 and lines[index].startswith("#") and not lines[index].startswith("# ---"):
            reason_lines.insert(0, lines[index].lstrip("#").strip())
            index -= 1
        section = ""
        for earlier in reversed(lines[: node.lineno - 1]):
            if earlier.startswith("# ---"):
                section = earlier.lstrip("#- ").strip()
                break
        out.append(Default(node.targets[0].id, _segment(lines, node.value), " ".join(reason_lines), section))
    return tuple(out)


def reasons() -> dict[str, str]:
    return {d.key: d.reason for d in read_defaults()}

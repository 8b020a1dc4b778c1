"""The pinned SGLang's own arguments as data, and any flag judged against them.

`<release>.json` beside this module is made by scripts/sglang-args.sh (reader.py) from the release's wheel; it is
read once per process (load(), cached). judge() says what is wrong with one flag and its value, or None: the flag
exists in that release (or is an alias of one), a switch takes no value and a flag with a value gets one, the value
is of the flag's type (int, float, SGLang's human_readable_int) and among its choices (the parser flags' choices
are the names the release's parser registries hold). It takes any flag name and value, not only the ones the deploy
renders today, so a per-model argument is judged the same way.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

HERE = Path(__file__).resolve().parent
SCRIPT = "scripts/sglang-args.sh"
# The release in an image's tag: v0.5.16, 0.5.16, v0.5.16-cu130, v0.5.16.post1-cu129 ...
_TAG_VERSION = re.compile(r"^v?(?P<version>[0-9]+\.[0-9]+\.[0-9]+(?:\.post[0-9]+)?)(?:[-_].*)?$")
_HUMAN_INT = re.compile(r"^[0-9]+(?:\.[0-9]+)?[kKmMgG]?$")   # SGLang's human_readable_int: 4096, 128k, 1M
CHECKED_TYPES = {"int", "float", "str", "human_readable_int"}


@dataclass(frozen=True)
class Table:
    version: str
    path: str
    flags: Mapping[str, Mapping[str, Any]]
    parsers: Mapping[str, tuple[str, ...]]


def image_version(image: str, version: str | None = None) -> str | None:
    """The SGLang release an image carries: ``version`` (sglang_version) when set, else its tag's; None when neither
    says it (a digest-only reference, a mirror's own tag)."""
    if version:
        return version
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    match = _TAG_VERSION.fullmatch(last.split(":", 1)[1])
    return match.group("version") if match else None


def known_versions() -> list[str]:
    return sorted((p.stem for p in HERE.glob("*.json")), key=lambda v: [int(x) if x.isdigit() else x
                                                                     for x in re.split(r"[.]", v)])


@lru_cache(maxsize=8)
def load(version: str) -> Table | None:
    """The table of ``version``, read once per process; None when there is none."""
    path = HERE / f"{version}.json"
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)+(\.post[0-9]+)?", version) or not path.is_file():
        return None
    raw = json.loads(path.read_text(encoding="utf-8"))
    return Table(version=raw["sglang"], path=f"sglang_infra/machine/sglang_args/{path.name}", flags=raw["flags"],
                 parsers={kind: tuple(names) for kind, names in raw["parsers"].items()})


def split(arg: str) -> tuple[str, Any]:
    """'--flag=value' -> ('--flag', 'value'); '--switch' -> ('--switch', True)."""
    name, sep, value = arg.partition("=")
    return (name, value) if sep else (name, True)


def shown_choices(choices: list[str], limit: int = 60) -> str:
    return ", ".join(choices) if len(choices) <= limit else ", ".join(choices[:limit]) + f", ... ({len(choices)})"


def _type_problem(kind: str, value: Any) -> str | None:
    text = str(value)
    if isinstance(value, bool):
        return "a value" if kind != "str" else None
    if kind == "int" and not re.fullmatch(r"-?[0-9]+", text):
        return "an integer"
    if kind == "float":
        try:
            float(text)
        except ValueError:
            return "a number"
    if kind == "human_readable_int" and not (_HUMAN_INT.fullmatch(text) or re.fullmatch(r"-?[0-9]+", text)):
        return "an integer (or SGLang's 128k / 1M form)"
    return None


def judge(table: Table, flag: str, value: Any) -> tuple[str, list[str] | None] | None:
    """(what is wrong, the valid choices or None) for ``flag`` given ``value`` (True: the bare switch; a list: the
    values of a flag that takes several), or None when the table's SGLang release accepts it."""
    spec = table.flags.get(flag)
    if spec is None:
        close = difflib.get_close_matches(flag, list(table.flags), n=3, cutoff=0.75)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        return f"{flag} is not an argument of SGLang {table.version}{hint}", None
    kind = spec.get("kind")
    if kind == "switch":
        if value is not True:
            return f"{flag} is a switch in SGLang {table.version}: it takes no value, and {value!r} was given", None
        return None
    if kind == "action":
        return None   # the release's own argparse action judges it
    if value is True:
        return f"{flag} takes a value in SGLang {table.version}, and none was given", None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if kind == "list" and not isinstance(value, (list, tuple)):
        values = str(value).split()
    choices = spec.get("choices")
    for each in values:
        wrong = _type_problem(spec.get("type", "str"), each) if spec.get("type") in CHECKED_TYPES else None
        if wrong:
            return f"{flag}={each} is not {wrong}, as SGLang {table.version} takes it", choices
        if choices is not None and str(each) not in choices:
            what = {"reasoning": "reasoning parser", "tool_call": "tool-call parser",
                    "speculative": "speculative algorithm"}.get(spec.get("registry", ""))
            said = f"'{each}' is not a {what} SGLang {table.version} registers" if what else \
                f"{flag}={each} is not one of SGLang {table.version}'s choices"
            return said, choices
    return None


def deprecated(table: Table, flag: str) -> str | None:
    """The flag that replaces a deprecated one, or None."""
    spec = table.flags.get(flag) or {}
    return spec.get("new_flag") or ("deprecated" if spec.get("deprecated") else None)

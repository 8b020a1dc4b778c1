"""The project's one Jinja environment: templates/ by path, compiled once per
run. render.py (plan -> the files the deploy writes) and the toolchain's
Dockerfile render through it.
"""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from ..hostside.printable import printable

PROJECT_DIR = Path(__file__).resolve().parent.parent.parent


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one Jinja environment of the project."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROJECT_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # A JSON string is a valid YAML double-quoted scalar; compose interpolates every value, so a `$` is doubled.
    env.filters["q"] = lambda value: json.dumps(str(value)).replace("$", "$$")
    # A value in a bash script: one word, single-quoted when it needs to be, so no `$(`, backtick or space acts.
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    # A value in a comment (of a script or a YAML file): one line, its control characters escaped.
    env.filters["line"] = printable
    # A value in a YAML file nothing interpolates (prometheus.yml): a JSON string, a YAML double-quoted scalar.
    env.filters["yq"] = lambda value: json.dumps(str(value))
    return env


def template_path(template: str) -> Path:
    """A template named relative to the project, or by absolute path for a site's own copy."""
    return PROJECT_DIR / template


@lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    # Compiled once per run, not once per host: compiling costs more than rendering.
    return environment().from_string(source)


@lru_cache(maxsize=16)
def template_text(template: str) -> str:
    """A file of templates/ used as it is (not a Jinja template), read once per run."""
    return template_path(template).read_text(encoding="utf-8")


def render_template(template: str, **context: Any) -> str:
    return _compiled(template_path(template).read_text(encoding="utf-8")).render(**context)

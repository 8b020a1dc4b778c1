"""The project's one Jinja environment: templates/ by path, compiled once per
run, and kept compiled between runs (Jinja's own bytecode cache, in the
operator's own 0700 folder, BYTECODE_DIR): a template's code is compiled again
only when its text, this file or Jinja changes. render.py (plan -> the files
the deploy writes) and the toolchain's Dockerfile render through it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from ..hostside.printable import printable
from .pycache import cache_home

PROJECT_DIR = Path(__file__).resolve().parent.parent.parent
# Where the templates' compiled code is kept between runs: compiling the templates a settled host's fingerprint
# renders was about 0.03 s of every run (docs/benchmarks.md). The operator's own folder, never a shared one (/tmp):
# the deploy runs the code it finds there.
BYTECODE_DIR = (cache_home() or Path("/nonexistent")) / "sglang-infra" / "templates"


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


@lru_cache(maxsize=1)
def bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's bytecode cache in BYTECODE_DIR when that is a directory of this user's alone (0700, no link; made
    so when absent, in a cache folder that exists), else None: the templates are then compiled on every run."""
    if not BYTECODE_DIR.parents[2].is_dir():   # no home (where ~/.cache would be): nothing is made
        return None
    try:
        BYTECODE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(BYTECODE_DIR)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return jinja2.FileSystemBytecodeCache(str(BYTECODE_DIR))


# A kept template's name: this file's digest (the environment's options and filters are in it) and its source's;
# Jinja's own bucket adds its version and Python's, and checks the source again. A template's older versions stay
# (a few KB each) until the folder is removed.
_KEPT_AS = "sglang-infra:" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


@lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    # Compiled once per run, not once per host: compiling costs more than rendering; and kept between runs.
    env, cache = environment(), bytecode_cache()
    if cache is None:
        return env.from_string(source)
    bucket = cache.get_bucket(env, f"{_KEPT_AS}:{hashlib.sha256(source.encode()).hexdigest()}", None, source)
    if bucket.code is None:
        bucket.code = env.compile(source)
        cache.set_bucket(bucket)
    return env.template_class.from_code(env, bucket.code, env.make_globals(None))


@lru_cache(maxsize=16)
def template_text(template: str) -> str:
    """A file of templates/ used as it is (not a Jinja template), read once per run."""
    return template_path(template).read_text(encoding="utf-8")


def render_template(template: str, **context: Any) -> str:
    return _compiled(template_path(template).read_text(encoding="utf-8")).render(**context)

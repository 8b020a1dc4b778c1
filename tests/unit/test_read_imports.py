"""What a plain host's read does without the standard library's json, re, shutil, urllib.parse and contextlib (issue
56: their imports were a fifth of the read's CPU, docs/benchmarks.md): each replacement held equal to the module it
replaces over many generated inputs, errors included."""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from sglang_infra.hostside import dockerapi, names, safefs
from sglang_infra.hostside.formats import jsonio
from sglang_infra.hostside.read import openpgp, snapshot

ROOT = Path(__file__).resolve().parents[2]
TEXT = ["", "a", "é", "\u2028", "\ud800", "\udfff", "\U0001f600", "\x00", "\x1f", "\x7f", '"', "\\", "/", "\n", "\t",
        "\u00ff", "\ufeff", "key", " "]


def value(rand: random.Random, depth: int = 0):
    """A JSON-able value (and some json refuses or answers oddly): nested containers, every scalar kind."""
    kind = rand.randrange(12 if depth < 4 else 9)
    if kind == 0:
        return rand.choice([None, True, False])
    if kind == 1:
        return rand.choice([0, -1, 1, 2 ** 64, -(2 ** 200), 10 ** 30, True])
    if kind == 2:
        return rand.choice([0.0, -0.0, 1.5, 1e300, -1e-300, 1e16, 0.1, float("inf"), float("-inf"), float("nan")])
    if kind in (3, 4, 5, 6, 7, 8):
        return "".join(rand.choice(TEXT) for _ in range(rand.randrange(6)))
    if kind in (9, 10):
        return [value(rand, depth + 1) for _ in range(rand.randrange(5))]
    keys = [rand.choice(["a", "b", "é", "\U0001f600", "", "\x00"]) + rand.choice(["", "1", "z"]) for _ in range(4)]
    if rand.random() < 0.1:   # keys json turns into text (alone: mixed kinds cannot be sorted, in either)
        keys = rand.choice([[1, 2, -3], [1.5, 0.25], [True, False], [None]])
    return {key: value(rand, depth + 1) for key in keys}


def outcome(call, *args, **kwargs):
    """What a call answers: ("ok", its value as text) or ("error", its exception's type and message)."""
    try:
        answer = call(*args, **kwargs)
    except Exception as error:
        return "error", type(error), str(error)
    return "ok", repr(answer) if not isinstance(answer, float) or not math.isnan(answer) else "nan"


def test_jsonio_dumps_as_json_does():
    rand = random.Random(56)
    for _ in range(4000):
        item = value(rand)
        for sort_keys in (False, True):
            assert outcome(jsonio.dumps, item, sort_keys=sort_keys) == outcome(json.dumps, item, sort_keys=sort_keys)
    circular: list = []
    circular.append(circular)
    for refused in (circular, {"a": {1, 2}}, [b"bytes"], {("a",): 1}, {1: 1, "a": 2}, object()):
        assert outcome(jsonio.dumps, refused, sort_keys=True) == outcome(json.dumps, refused, sort_keys=True)
        assert outcome(jsonio.dumps, refused) == outcome(json.dumps, refused)


def test_jsonio_loads_as_json_does_whole_documents_and_errors_alike():
    rand = random.Random(57)
    texts = [json.dumps(value(rand), sort_keys=rand.random() < 0.5, indent=rand.choice([None, 1]),
                        ensure_ascii=rand.random() < 0.5) for _ in range(3000)]
    broken = ["", " ", "{", "[1,]", '{"a" 1}', "01", "1 2", "[1] x", "nul", "NaN", "-Infinity", "Infinity", "\ufeff[1]",
              '"\\ud800"', '"\\x"', '"a\nb"', '"\x00"', " \t\r\n[1] \n", "[1]\u00a0", "\u00a0[1]", "1e999", "-0",
              "[" * 100 + "]" * 100, "[" * 100000, '{"a": 1, "a": 2}', "[1,2", "tru", "{} {}", "\x0c[]", "1.", ".5"]
    for text in texts + broken + [t[:len(t) // 2] for t in texts[:500]]:
        assert outcome(jsonio.loads, text) == outcome(json.loads, text), text
        raw = text.encode("utf-8", "surrogatepass")
        assert outcome(jsonio.loads, raw) == outcome(json.loads, raw), raw
    for raw in [b"", b"\xef\xbb\xbf[1]", b"\xff\xfe[\x001\x00]\x00", b"\xfe\xff\x00[\x001\x00]", b"[\x001\x00]\x00",
                "[1]".encode("utf-32-le"), "[1]".encode("utf-32-be"), "[1]".encode("utf-16-be"), b"\xff", b"[\"\xc3\"]",
                b"\x00", b"1", b"12", b"123", bytearray(b"[1]"), 12, None]:
        assert outcome(jsonio.loads, raw) == outcome(json.loads, raw), raw


def test_jsonio_answers_through_json_where_its_python_has_no_json_accelerator(monkeypatch):
    monkeypatch.setattr(jsonio, "_make_encoder", None)
    monkeypatch.setattr(jsonio, "_make_scanner", None)
    monkeypatch.setattr(jsonio, "_scan", [])
    rand = random.Random(58)
    for _ in range(300):
        item = value(rand)
        assert outcome(jsonio.dumps, item, sort_keys=True) == outcome(json.dumps, item, sort_keys=True)
        text = json.dumps(item)
        assert outcome(jsonio.loads, text) == outcome(json.loads, text)


def test_jsonio_imports_no_json_when_it_answers_itself():
    program = ("import sys; sys.path.insert(0, sys.argv[1])\n"
               "from sglang_infra.hostside.formats import jsonio\n"
               "jsonio.dumps(jsonio.loads(b'{\"a\": [1, 2.5, null, \"\\\\u00e9\"]}'), sort_keys=True)\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('json', 're', 'enum')))\n"
               "jsonio.dumps({1, 2}) if False else None\n"
               "try:\n    jsonio.loads('[1,')\nexcept ValueError as error:\n    print(type(error).__name__)\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", program, str(ROOT)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout == "[]\nJSONDecodeError\n"


def test_held_is_the_pattern_it_replaced():
    pattern = re.compile(r"/proc/self/fd/([0-9]+)(/.*)?")
    rand = random.Random(59)
    parts = ["/proc/self/fd/", "/proc/self/fd", "1", "23", "٣", "/", "a", "\n", "/x", "/proc", "self", "fd/", ""]
    for _ in range(50000):
        path = "".join(rand.choice(parts) for _ in range(rand.randrange(5)))
        found = pattern.fullmatch(path)
        assert safefs.held(path) == (found and (found.group(1), found.group(2) or "")), path


def test_heredoc_end_is_the_pattern_it_replaced():
    pattern = re.compile(r"<<-?\s*'([A-Za-z_][A-Za-z0-9_]*)'\s*$")
    rand = random.Random(60)
    parts = ["<<", "-", "'", " ", "\t", "a", "Z", "_", "9", "\n", "\x0b", "\u2028", "é", "<", "x", "'EOF'", "PYTHON"]
    for _ in range(50000):
        line = "".join(rand.choice(parts) for _ in range(rand.randrange(10)))
        found = pattern.search(line)
        assert names.heredoc_end(line) == (found and found.group(1)), line


def test_armored_is_the_pattern_it_replaced():
    pattern = re.compile(rb"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S)
    rand = random.Random(61)
    parts = [b"-----BEGIN PGP PUBLIC KEY BLOCK-----", b"-----END PGP PUBLIC KEY BLOCK-----", b"\r", b"\n", b"a", b" ",
             b"-----BEGIN PGP PUBLIC KEY BLOCK", b"-", b"=abc"]
    for _ in range(50000):
        data = b"".join(rand.choice(parts) for _ in range(rand.randrange(9)))
        assert openpgp.armored(data) == ([m.group(1) for m in pattern.finditer(data)], pattern.sub(b"", data)), data


def test_labelled_is_the_pattern_it_replaced():
    pattern = re.compile(r'^\s*(?:' + re.escape(names.MODEL_LABEL) + '|' + re.escape(names.DRAFTER_LABEL)
                         + r'):\s*"?([^"\s]+)"?\s*$', re.M)
    rand = random.Random(62)
    parts = [names.MODEL_LABEL + ":", names.DRAFTER_LABEL + ":", names.MODEL_LABEL, " ", "\n", "\t", '"', "a", "@",
             "\u2028", "\x0b", "\r", ":", "org/m@0123abc", "\n  ", "- "]
    for _ in range(50000):
        text = "".join(rand.choice(parts) for _ in range(rand.randrange(10)))
        assert snapshot.labelled(text) == pattern.findall(text), text
    compose = (ROOT / "tests" / "unit" / "fixtures").rglob("*compose*")
    for path in compose:
        text = path.read_text(errors="replace")
        assert snapshot.labelled(text) == pattern.findall(text), path


def test_urlencode_is_urllibs():
    rand = random.Random(63)
    for _ in range(5000):
        query = {"".join(rand.choice(TEXT[:4] + TEXT[6:] + ["&", "=", "+", "~", "%", "?", "#", "a b"])
                         for _ in range(rand.randrange(4))): "".join(rand.choice(TEXT[:4] + TEXT[6:] + ["&", "=", "~"])
                                                                    for _ in range(rand.randrange(6)))
                 for _ in range(rand.randrange(3))}
        assert dockerapi.urlencode(query) == urllib.parse.urlencode(query)
    query = {"all": "1", "filters": json.dumps({"label": ["com.docker.compose.project=sglang"]})}
    assert dockerapi.urlencode(query) == urllib.parse.urlencode(query)
    with pytest.raises(UnicodeEncodeError):
        dockerapi.urlencode({"a": "\ud800"})


@pytest.mark.parametrize("path", [None, "", ":", "{t}/bin", "{t}/bin:{t}/bin", "{t}/nothing:{t}/bin", "{t}/sub:{t}/bin",
                                  ":{t}/bin", "{t}/bin:", "{t}/tool", "bin", "sub:bin", "/nonexistent:{t}/bin",
                                  "{t}/dir-named-tool:{t}/bin", "{t}/noexec:{t}/bin", "{t}/noexec"])
@pytest.mark.parametrize("command", ["tool", "sub/tool", "./tool", "missing", "dir-named-tool", "", "bin/tool"])
def test_which_is_shutils(tmp_path, monkeypatch, path, command):
    for folder in ("bin", "sub", "noexec", "dir-named-tool/tool", "tool"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for file, mode in (("bin/tool", 0o755), ("sub/tool", 0o755), ("noexec/tool", 0o644), ("tool/tool", 0o755)):
        (tmp_path / file).write_text("#!/bin/sh\n")
        (tmp_path / file).chmod(mode)
    monkeypatch.chdir(tmp_path)
    if path is None:
        monkeypatch.delenv("PATH", raising=False)
    else:
        monkeypatch.setenv("PATH", path.format(t=tmp_path))
    assert safefs.which(command) == shutil.which(command)
    monkeypatch.setenv("PATH", os.defpath)
    assert safefs.which("sh") == shutil.which("sh") is not None

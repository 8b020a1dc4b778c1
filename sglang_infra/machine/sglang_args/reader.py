"""The real SGLang's own arguments, read from its released wheel without importing it.

    scripts/sglang-args.sh VERSION      (python -m sglang_infra.machine.sglang_args.reader VERSION)

downloads `sglang==VERSION` from the package index pip uses (`pip download --no-deps`, one fixed wheel: see WHEEL)
and reads its source with ast the way its own parser registers its arguments (importing it would pull torch and
SGLang's kernels):

- every annotated field `name: A[T, "help"]` or `A[T, Arg(...)]` of the classes that declare the server's fields
  (0.5.16: `ServerArgs` in sglang/srt/server_args.py; 0.5.23 and later: every class of
  sglang/srt/arg_groups/fields/*.py that carries `_NS_PATH`), as arg_utils.add_cli_args_from_dataclass turns it into
  a flag: `--name-with-dashes` (or Arg's cli_name) and its aliases, a bool a bare switch, a list `nargs`, the
  type's callable, the choices (Arg's, else the Literal's), the default;
- every `parser.add_argument(...)` call in `ServerArgs.add_cli_args` (the dynamic choices, the deprecated flags,
  --config);
- the names the reasoning and tool-call parser registries hold (`ReasoningParser.DetectorMap`,
  `FunctionCallParser.ToolCallParserEnum`, or the name lists later releases keep beside them), which are the
  choices of --reasoning-parser and --tool-call-parser.

A value the source computes (a comprehension, a call) is resolved through the module's own names and imports where
that is plain data (lists, tuples, sets, dict keys, `+`, a class attribute), else it is recorded as unresolved, with
its source text, and the preflight judges the flag's type but not its choices.

The result is written to sglang_infra/machine/sglang_args/VERSION.json (table.py reads it), generated, never edited
by hand; tests/unit/test_sglang_args.py regenerates the pinned version's from the wheel and fails on any difference.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping

HERE = Path(__file__).resolve().parent
FORMAT = 1
SCRIPT = "scripts/sglang-args.sh"
# One exact wheel per release, whatever Python runs the script: SGLang's wheels differ only in their compiled parts,
# and the table records which file it read. CPython 3.11, manylinux 2.34 x86_64 is the build every release has.
WHEEL = ("--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
         "--platform", "manylinux_2_34_x86_64")
SERVER_ARGS = "sglang/srt/server_args.py"
FIELDS_DIR = "sglang/srt/arg_groups/fields/"
REGISTRIES = {   # parser kind -> ((module, class, attribute), ...) in the order a release is tried
    "reasoning": (("sglang/srt/parser/reasoning_parser_names.py", None, "REASONING_PARSER_NAMES"),
                  ("sglang/srt/parser/reasoning_parser.py", "ReasoningParser", "DetectorMap"),
                  ("sglang/srt/reasoning_parser.py", "ReasoningParser", "DetectorMap")),
    "tool_call": (("sglang/srt/function_call/parser_names.py", None, "TOOL_CALL_PARSER_NAMES"),
                  ("sglang/srt/function_call/function_call_parser.py", "FunctionCallParser", "ToolCallParserEnum"),
                  ("sglang/srt/function_call_parser.py", "FunctionCallParser", "ToolCallParserEnum")),
}
PARSER_FLAGS = {"reasoning": "--reasoning-parser", "tool_call": "--tool-call-parser"}
# --speculative-algorithm is a free string to argparse; the release resolves it in its speculative hook (an alias such
# as NEXTN compared there by name) and then by SpeculativeAlgorithm's members (NONE aside).
SPECULATIVE_FLAG = "--speculative-algorithm"
SPECULATIVE_ENUM = ("sglang/srt/speculative/spec_info.py", "SpeculativeAlgorithm")
SPECULATIVE_HOOKS = ("sglang/srt/arg_groups/speculative_hook.py", SERVER_ARGS)


class Unresolved(Exception):
    """A value the source computes in a way that is not plain data."""


class Source:
    """The wheel's Python files, parsed on demand, and the plain values their names stand for."""

    def __init__(self, files: Mapping[str, str]):
        self.files = files
        self._trees: dict[str, ast.Module] = {}

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.files[path], filename=path)
        return self._trees[path]

    def module_path(self, dotted: str, level: int, here: str) -> str | None:
        """The file of an imported module (`from X import ...`), when the wheel holds it."""
        if level:
            base = here.rsplit("/", level)[0]
            dotted = f"{base.replace('/', '.')}.{dotted}" if dotted else base.replace("/", ".")
        for candidate in (dotted.replace(".", "/") + ".py", dotted.replace(".", "/") + "/__init__.py"):
            if candidate in self.files:
                return candidate
        return None

    def lookup(self, path: str, name: str, depth: int = 0) -> tuple[str, ast.AST]:
        """(module, node) that a module-level name is bound to: its last plain assignment, a class, or an import."""
        if depth > 8:
            raise Unresolved(name)
        found: tuple[str, ast.AST] | None = None
        for node in self.tree(path).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                found = (path, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                    and node.value is not None:
                found = (path, node.value)
            elif isinstance(node, ast.ClassDef) and node.name == name:
                found = (path, node)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        module = self.module_path(node.module or "", node.level, path)
                        if module is not None:
                            found = self.lookup(module, alias.name, depth + 1)
        if found is None:
            raise Unresolved(name)
        return found

    def value(self, path: str, node: ast.AST, depth: int = 0) -> Any:
        """The plain value (str, number, bool, None, list) of an expression, or Unresolved."""
        if depth > 12:
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    out += list(self.value(path, element.value, depth + 1))
                else:
                    out.append(self.value(path, element, depth + 1))
            return out
        if isinstance(node, ast.Dict):
            return [self.value(path, key, depth + 1) for key in node.keys if key is not None]
        if isinstance(node, ast.Name):
            where, bound = self.lookup(path, node.id)
            if isinstance(bound, ast.ClassDef):
                raise Unresolved(node.id)
            return self.value(where, bound, depth + 1)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            where, bound = self.lookup(path, node.value.id)
            if isinstance(bound, ast.ClassDef):
                return self.value(where, class_attribute(bound, node.attr), depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return list(self.value(path, node.left, depth + 1)) + list(self.value(path, node.right, depth + 1))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("list", "tuple", "sorted", "set") and len(node.args) == 1:
                items = list(self.value(path, node.args[0], depth + 1))
                return sorted(items) if func.id == "sorted" else items
            if isinstance(func, ast.Attribute) and func.attr == "keys" and not node.args:
                return list(self.value(path, func.value, depth + 1))
        raise Unresolved(ast.unparse(node))


def class_attribute(cls: ast.ClassDef, name: str) -> ast.AST:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                and node.value is not None:
            return node.value
    raise Unresolved(f"{cls.name}.{name}")


def find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


# ---------------------------------------------------------------- the annotated fields

def _subscript_args(node: ast.AST) -> list[ast.expr]:
    inner = node.slice if isinstance(node, ast.Subscript) else None
    if inner is None:
        return []
    return list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return ast.unparse(node)


def _unwrap_type(node: ast.AST) -> tuple[ast.AST, bool]:
    """(the type inside Optional[...] / X | None, whether None is allowed)."""
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        return _subscript_args(node)[0], True
    if isinstance(node, ast.Subscript) and _name(node.value) == "Union":
        parts = [p for p in _subscript_args(node) if _name(p) != "None"]
        return (parts[0], True) if len(parts) == 1 else (node, True)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [p for p in (node.left, node.right) if _name(p) != "None"]
        return (parts[0], True) if len(parts) == 1 else (node, True)
    return node, False


SCALARS = {"str": "str", "int": "int", "float": "float"}


def _type_of(node: ast.AST) -> str:
    """The argparse type= the annotation gives (arg_utils._infer_type_func): str, int or float; anything else str."""
    return SCALARS.get(_name(node), "str")


def _keywords(call: ast.Call) -> dict[str, ast.AST]:
    return {k.arg: k.value for k in call.keywords if k.arg}


def _resolved(source: Source, path: str, node: ast.AST | None) -> Any:
    if node is None:
        return None
    return source.value(path, node)


def _choices(source: Source, path: str, node: ast.AST | None) -> tuple[list | None, str | None]:
    """(the choices as a sorted list of strings, None) or (None, the source text when they are computed)."""
    if node is None:
        return None, None
    try:
        values = source.value(path, node)
    except Unresolved:
        return None, ast.unparse(node)
    return sorted({str(v) for v in values}), None


def _default(source: Source, path: str, node: ast.AST | None) -> Any:
    if node is None:
        return None
    try:
        value = source.value(path, node)
    except Unresolved:
        return {"computed": ast.unparse(node)}
    return value if isinstance(value, (str, int, float, bool, type(None), list)) else str(value)


def field_flags(source: Source, path: str, cls: ast.ClassDef) -> dict[str, dict]:
    """The flags arg_utils.add_cli_args_from_dataclass registers for one class's annotated fields."""
    flags: dict[str, dict] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = node.annotation
        if not (isinstance(annotation, ast.Subscript) and _name(annotation.value) in ("A", "Annotated")):
            continue
        parts = _subscript_args(annotation)
        raw, metas = parts[0], parts[1:]
        meta: dict[str, ast.AST] = {}
        for each in metas:
            if isinstance(each, ast.Call) and _name(each.func) == "Arg":
                meta = _keywords(each)
                break
            if isinstance(each, ast.Constant) and isinstance(each.value, str):
                break
        else:
            continue   # neither help text nor Arg: add_cli_args_from_dataclass skips it
        if meta.get("no_cli") is not None and _resolved(source, path, meta["no_cli"]) is True:
            continue
        field = node.target.id
        cli_name = _resolved(source, path, meta.get("cli_name")) or "--" + field.replace("_", "-")
        aliases = _resolved(source, path, meta.get("aliases")) or []
        inner, optional = _unwrap_type(raw)
        entry: dict[str, Any] = {"field": field, "optional": optional,
                                 "default": _default(source, path, node.value) if node.value is not None else None,
                                 "required": node.value is None}
        literal = _subscript_args(inner) if isinstance(inner, ast.Subscript) and _name(inner.value) == "Literal" \
            else None
        choices, computed = _choices(source, path, meta.get("choices"))
        if computed is not None and literal:
            choices, computed = _choices(source, path, ast.List(elts=literal, ctx=ast.Load()))
        if meta.get("action") is not None:
            entry.update(kind="action", action=_name(meta["action"]))
        elif literal is not None:
            entry.update(kind="value", type=_type_of(ast.Constant(value=None)) if not literal else
                         SCALARS.get(type(_resolved(source, path, literal[0])).__name__, "str"))
            if choices is None and computed is None:
                choices, computed = _choices(source, path, ast.List(elts=literal, ctx=ast.Load()))
        elif isinstance(inner, ast.Subscript) and _name(inner.value) in ("List", "list") \
                and meta.get("type_parser") is None:
            element = _subscript_args(inner)
            entry.update(kind="list", type=_type_of(element[0]) if element else "str",
                         nargs=_resolved(source, path, meta.get("nargs")) or "+")
        elif _name(inner) == "bool":
            entry.update(kind="switch")
        else:
            entry.update(kind="value", type=_type_of(inner))
            if meta.get("nargs") is not None:
                entry["nargs"] = _resolved(source, path, meta["nargs"])
        if meta.get("type_parser") is not None:
            entry["type"] = _name(meta["type_parser"])
        if choices is not None:
            entry["choices"] = choices
        if computed is not None:
            entry["choices_computed"] = computed
        flags[cli_name] = entry
        for alias in aliases:
            flags[alias] = {**entry, "alias_of": cli_name}
    return flags


# ---------------------------------------------------------------- the hand-registered flags

def _add_cli_args(tree: ast.Module) -> ast.FunctionDef | None:
    cls = find_class(tree, "ServerArgs")
    if cls is None:
        return None
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"), None)


def manual_flags(source: Source, parsers: Mapping[str, list[str]]) -> dict[str, dict]:
    """The flags `ServerArgs.add_cli_args` registers by hand (`parser.add_argument(...)`)."""
    function = _add_cli_args(source.tree(SERVER_ARGS))
    if function is None:
        raise SystemExit(f"{SERVER_ARGS} has no ServerArgs.add_cli_args: this release registers its arguments some "
                         "other way; read it and teach reader.py")
    flags: dict[str, dict] = {}
    for call in ast.walk(function):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("-"):
            continue
        kw = _keywords(call)
        dest = _resolved_or(source, kw.get("dest"), names[0].lstrip("-").replace("-", "_"))
        entry: dict[str, Any] = {"field": dest, "optional": True, "default": None, "required": False}
        action = kw.get("action")
        action_name = None if action is None else _resolved_or(source, action, _name(action))
        parser_kind = next((kind for kind, flag in PARSER_FLAGS.items() if flag in names), None)
        if action_name in ("store_true", "store_false"):
            entry.update(kind="switch")
        elif action_name is not None and action_name.startswith("Deprecated") and "type" not in kw \
                and "choices" not in kw and "nargs" not in kw:
            entry.update(kind="switch", action=action_name)
        else:
            entry.update(kind="value", type=_type_of(kw["type"]) if "type" in kw else "str")
            if action_name is not None:
                entry["action"] = action_name
        if action_name is not None and action_name.startswith("Deprecated"):
            entry["deprecated"] = True
            new = _resolved_or(source, kw.get("new_flag"), None)
            if new:
                entry["new_flag"] = new
        if parser_kind is not None:
            entry["choices"] = sorted({"auto", *parsers[parser_kind]})
            entry["registry"] = parser_kind
        elif "choices" in kw:
            choices, computed = _choices(source, SERVER_ARGS, kw["choices"])
            if choices is not None:
                entry["choices"] = choices
            else:
                entry["choices_computed"] = computed
        for name in names:
            flags[name] = entry if name == names[0] else {**entry, "alias_of": names[0]}
    return flags


def _resolved_or(source: Source, node: ast.AST | None, fallback: Any) -> Any:
    if node is None:
        return fallback
    try:
        return source.value(SERVER_ARGS, node)
    except Unresolved:
        return fallback


# ---------------------------------------------------------------- the parser registries

def parser_names(source: Source) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({kind: sorted names}, {kind: 'path:Class.attribute' read}) of the reasoning and tool-call registries."""
    names: dict[str, list[str]] = {}
    read: dict[str, str] = {}
    for kind, places in REGISTRIES.items():
        for path, cls_name, attribute in places:
            if path not in source.files:
                continue
            tree = source.tree(path)
            if cls_name is None:
                node: ast.AST = source.lookup(path, attribute)[1]
            else:
                cls = find_class(tree, cls_name)
                if cls is None:
                    continue
                node = class_attribute(cls, attribute)
            names[kind] = sorted(str(n) for n in source.value(path, node))
            read[kind] = f"{path}:{cls_name + '.' if cls_name else ''}{attribute}"
            break
        else:
            raise SystemExit(f"no {kind} parser registry found in the wheel (looked for "
                             f"{', '.join(p for p, _, _ in places)}); read the release and teach reader.py")
    return names, read


def speculative_algorithms(source: Source) -> tuple[list[str], str]:
    """(the names --speculative-algorithm resolves, what was read): SpeculativeAlgorithm's members but NONE, and each
    name the speculative hook compares the flag's value with (its aliases)."""
    path, cls_name = SPECULATIVE_ENUM
    cls = find_class(source.tree(path), cls_name) if path in source.files else None
    if cls is None:
        raise SystemExit(f"no {cls_name} in {path}: read the release and teach reader.py")
    names = {target.id for node in cls.body if isinstance(node, ast.Assign) for target in node.targets
             if isinstance(target, ast.Name) and target.id.isupper() and target.id != "NONE"}
    hook = next((each for each in SPECULATIVE_HOOKS if each in source.files
                 and "speculative_algorithm ==" in source.files[each]), None)
    for node in ast.walk(source.tree(hook)) if hook else ():
        if isinstance(node, ast.Compare) and _name(node.left).endswith("speculative_algorithm") \
                and all(isinstance(op, ast.Eq) for op in node.ops):
            names.update(c.value for c in node.comparators if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return sorted(names), f"{path}:{cls_name}'s members" + (f" and the names {hook} compares it with" if hook else "")


# ---------------------------------------------------------------- the table

def field_classes(source: Source) -> list[tuple[str, ast.ClassDef]]:
    """(module, class) of every class that declares the server's fields, in the order the release collects them."""
    found = [(path, cls) for path in sorted(p for p in source.files if p.startswith(FIELDS_DIR) and p.endswith(".py"))
             for cls in source.tree(path).body
             if isinstance(cls, ast.ClassDef) and any(isinstance(n, ast.Assign) and any(
                 isinstance(t, ast.Name) and t.id == "_NS_PATH" for t in n.targets) for n in cls.body)]
    if found:
        return found
    cls = find_class(source.tree(SERVER_ARGS), "ServerArgs")
    if cls is None:
        raise SystemExit(f"{SERVER_ARGS} has no class ServerArgs and there is no {FIELDS_DIR}: read the release "
                         "and teach reader.py")
    return [(SERVER_ARGS, cls)]


def read(files: Mapping[str, str], version: str, wheel: str, sha256: str) -> dict:
    """The table of one release from its Python files (path inside the wheel -> text)."""
    source = Source(files)
    parsers, registries = parser_names(source)
    classes = field_classes(source)
    flags: dict[str, dict] = {}
    for path, cls in classes:
        flags.update(field_flags(source, path, cls))
    flags.update(manual_flags(source, parsers))   # argparse keeps the later registration of a name
    algorithms, algorithms_read = speculative_algorithms(source)
    if SPECULATIVE_FLAG in flags and flags[SPECULATIVE_FLAG].get("choices") is None:
        flags[SPECULATIVE_FLAG] = {**flags[SPECULATIVE_FLAG], "choices": algorithms, "registry": "speculative"}
    declared_in = sorted({path for path, _ in classes})
    return {
        "_": f"Generated by {SCRIPT} {version}; never edit by hand. The arguments of the real SGLang {version} as its "
             "own parser registers them, read from its wheel's source with ast (never imported).",
        "format": FORMAT,
        "sglang": version,
        "made_by": f"{SCRIPT} (sglang_infra/machine/sglang_args/reader.py)",
        "made_from": {
            "wheel": wheel, "sha256": sha256,
            "how": (f"ast over {', '.join(declared_in)}: each annotated field A[T, help | Arg(...)] of "
                    f"{', '.join(sorted({c.name for _, c in classes}))} as arg_utils.add_cli_args_from_dataclass "
                    f"registers it; the parser.add_argument calls of ServerArgs.add_cli_args in {SERVER_ARGS}; the "
                    f"parser registries {registries['reasoning']} and {registries['tool_call']}; the speculative "
                    f"algorithms, {algorithms_read}"),
        },
        "parsers": parsers,
        "flags": dict(sorted(flags.items())),
    }


def wheel_files(path: Path) -> dict[str, str]:
    """The sglang/srt Python files of a wheel, by their path inside it."""
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name).decode("utf-8") for name in archive.namelist()
                if name.startswith("sglang/srt/") and name.endswith(".py")}


def download(version: str, into: Path) -> Path:
    """`pip download --no-deps` of the one wheel WHEEL names, from the index pip uses here."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *WHEEL, "-d", str(into),
               f"sglang=={version}"]
    subprocess.run(command, check=True, timeout=900)
    found = sorted(into.glob(f"sglang-{version}-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"pip download left {len(found)} sglang {version} wheels in {into}")
    return found[0]


def table_for(version: str, cache: Path | None = None) -> dict:
    """The table of ``version``, from its wheel (downloaded into ``cache``, or a temporary directory)."""
    def build(directory: Path) -> dict:
        wheel = next(iter(sorted(directory.glob(f"sglang-{version}-*.whl"))), None) or download(version, directory)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        return read(wheel_files(wheel), version, wheel.name, digest)

    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        return build(cache)
    with tempfile.TemporaryDirectory() as scratch:
        return build(Path(scratch))


def render(table: Mapping[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=False, ensure_ascii=False) + "\n"


def table_path(version: str) -> Path:
    return HERE / f"{version}.json"


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the sglang release, e.g. 0.5.16 (the pinned image's tag without its v)")
    parser.add_argument("--cache", type=Path, default=None, help="keep the wheel in this directory (reused)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    table = table_for(args.version, args.cache)
    out = table_path(args.version)
    out.write_text(render(table), encoding="utf-8")
    print(f"{out}: {len(table['flags'])} flags, {len(table['parsers']['reasoning'])} reasoning and "
          f"{len(table['parsers']['tool_call'])} tool-call parsers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

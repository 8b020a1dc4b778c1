"""json.dumps and json.loads on CPython's _json alone, for the host's read: the same C encoder and scanner the json
module runs, driven as json drives them, without importing json (its decoder imports re, and re enum: a fifth of a
converged host's read, docs/benchmarks.md). Whatever the C code does not answer itself (an error, a BOM, bytes in
another encoding, a Python without _json) is asked of the json module, which answers as it always does (the same
value, the same exception), so a caller sees json's behaviour either way; tests/unit/test_read_imports.py holds the two
equal. A program run through the code cache loads json only then (ship.LAZY)."""

try:
    import _json
    _C: tuple = (_json.encode_basestring_ascii, _json.make_encoder, _json.make_scanner)
except (ImportError, AttributeError):   # a Python built without _json: json's own Python code answers
    _C = (None, None, None)
_ascii, _make_encoder, _make_scanner = _C

_BLANKS = " \t\n\r"   # json.decoder.WHITESPACE
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}   # json.decoder's
_scan: list = []   # the scanner, made on first use


class _Decoder:
    """The attributes make_scanner reads of json.JSONDecoder() (its defaults)."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _refuse(value):
    raise TypeError   # json.dumps is asked again, and raises its own error


def dumps(obj, *, sort_keys=False):
    """json.dumps(obj, sort_keys=sort_keys)."""
    try:
        if isinstance(obj, str):
            return _ascii(obj)
        chunks = _make_encoder({}, _refuse, _ascii, None, ": ", ", ", sort_keys, False, True)(obj, 0)
        return "".join(chunks)
    except Exception:   # _json missing or not as expected, or a value json refuses: json answers
        import json
        return json.dumps(obj, sort_keys=sort_keys)


def _text(data):
    """``data`` as json.loads decodes it, when that is UTF-8 (json.detect_encoding); None otherwise."""
    if isinstance(data, str):
        return None if data.startswith("\ufeff") else data
    if not isinstance(data, (bytes, bytearray)) or not data or not data[0] or (len(data) >= 2 and not data[1]) \
            or data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:3] == b"\xef\xbb\xbf":
        return None
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def loads(data):
    """json.loads(data): a str, or bytes in UTF-8 (others as json reads them)."""
    try:
        text = _text(data)
        if text is not None:
            if not _scan:
                _scan.append(_make_scanner(_Decoder()))
            start = len(text) - len(text.lstrip(_BLANKS))
            value, end = _scan[0](text, start)
            if not text[end:].strip(_BLANKS):
                return value
    except Exception:   # not JSON, or _json missing or not as expected: json answers (its own error)
        pass
    import json
    return json.loads(data)

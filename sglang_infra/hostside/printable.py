"""Text that came from a host (a container's log line, a server's error body, a worker URL the gateway
reports, a folder name in hf-cache), made safe to print on a terminal: every control character is written
as an escape, so no byte a host or a server sent can move the cursor, retitle a window, or hide a line.
The one helper for it, used by the host programs and the control side alike. Standard library only.
"""

import sys
import unicodedata

# Besides the C0/C1 controls: the bidirectional overrides and isolates, and the line/paragraph separators.
_INVISIBLE = frozenset("\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(char):
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value):
    """``value`` as one printable line: str() of it, each control character (newlines too) as an escape."""
    text = value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)
    if text.isprintable():
        return text
    return "".join(_escaped(c) if (unicodedata.category(c) == "Cc" or c in _INVISIBLE) else c for c in text)


def printable_lines(text):
    """A multi-line text (a log, an error body) with each line made printable, the newlines kept."""
    raw = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text)
    return "\n".join(printable(line) for line in raw.splitlines())


def written_or_said(program, what, textfile_dir, write):
    """A metrics program's exit code: 0 once ``write()`` ran, else 1 with one line on stderr saying why."""
    try:
        write()
    except OSError as error:
        print(f"{program}: could not write {what} into {printable(textfile_dir)}: {printable(error)}",
              file=sys.stderr)
        return 1
    return 0

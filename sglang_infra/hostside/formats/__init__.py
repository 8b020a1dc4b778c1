"""The forms of a value that host programs and the control side write alike. Every module, a line each
(tests/unit/test_hostside_index.py keeps the list whole):

    jsonio.py   json.dumps and json.loads on _json alone, for the host's read (no json, re, enum)
    netloc.py   the one host:port form, an IPv6 address in brackets
    units.py    the one size formatter
"""

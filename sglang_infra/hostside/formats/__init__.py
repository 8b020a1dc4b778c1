"""The forms of a value that host programs and the control side write alike. Every module, a line each
(tests/unit/test_hostside_index.py keeps the list whole):

    netloc.py   the one host:port form, an IPv6 address in brackets
    units.py    the one size formatter
"""

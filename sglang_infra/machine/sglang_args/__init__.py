"""The real SGLang's own arguments, per release: read from its wheel with ast (reader.py, run by
scripts/sglang-args.sh) into `<release>.json` beside it, generated and never edited by hand; the table loaded once and
any flag judged against it (table.py); a serving host's rendered flags judged in the preflight (launch.py).
"""

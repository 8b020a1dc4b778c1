"""The gate on the host, every module kept as a file on a serving host (the gate's script and the metrics timer
carry them). Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    gate.py           the gate: checks after a change, stamp or roll back
    gate_metrics.py   the last gate's result as Prometheus metrics for the node exporter's textfile collector
    stamp.py          the gate's contract: the digest of what passed
    goodcopy.py       the last known-good config (*.good) and its checked copy, kept and put back
    report.py         the snapshot's report section for status.sh: GPUs, engine, compose, cache, disk, last gate
"""

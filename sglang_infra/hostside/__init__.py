"""Programs that run on the hosts, not on the control machine.

Standard library only (python3 >= 3.9), except the pull (pull/: hfpull.py and
the modules it imports), which runs in the pull's venv with huggingface_hub;
toolchain_check.py runs inside the serving image (gpu_kernel_check.py too, from
the gate), gateway_launch.py inside the gateway's image with SMG (smg). None
of them imports anything outside this folder; what they share (the manifest
format, the gate's digest, the Docker Engine API) is defined once here and
imported relatively (the folders below import this folder's modules, never the
other way).
The control side ships them with sglang_infra/run/ship.py, which bundles a
program and the modules it imports into one self-contained source. A program
the hosts keep (the gate's scripts and the modules they carry) is part of what
a worker's stamp covers: a change of its text re-gates the worker.

Laid out by what the hosts keep. This folder's top holds the programs a host
keeps as files (the gate and its checks, the metrics programs, the kernel check,
the gateway's launcher, the toolchain image's check) and the modules they, or
the pull, carry; no other module may lie here (tests/unit/test_tree_shape.py
computes the set from ship.py). They stay side by side, more than twelve: moving
one changes its text or its bundle's, so every converged host would re-gate or
recreate its gateway. The programs run inline per command and never stored on a
host live in folders by concern.

Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    read/                the host's reads, run per command: the snapshot, the settled stamp, the cache, the door
    write/               the host's writes, run per command: put, a directory's ACL entry, drift repair
    roll/                the rolling change, run per command: drain, the gateways' worker sets, the last good back
    pull/                the pull, in the pull's venv: its modules are listed in pull/__init__.py

    gate.py              the gate: checks after a change, stamp or roll back
    checks.py            readiness, the tool-calling check and the benchmark
    gate_metrics.py      the last gate's result as Prometheus metrics for the node exporter's textfile collector
    gpu_metrics.py       each GPU's health as Prometheus metrics for the node exporter's textfile collector
    gpu_kernel_check.py  a CUDA kernel compiled for the GPUs' architecture and run on every GPU (driver API,
                         ctypes), its result checked; the gate runs it inside the serving container
    gateway_launch.py    starts SMG inside the gateway's image, worker set and keys from files
    toolchain_check.py   the pins inside the toolchain image
    report.py            the snapshot's report section for status.sh: GPUs, engine, compose, cache, disk, last gate
    manifest.py          the verified-pull record `<home>/verified/<repo folder>/<commit>.json`, and whose it must be
    apikey.py            the server's API key: its file's format (read and written here only), its header, redaction
    bounded.py           reads of a server's answer bounded in bytes and in time
    nvsmi.py             nvidia-smi -q -x read: the driver, its CUDA, each GPU's persistence, fabric and health
    stamp.py             the gate's contract: the digest of what passed
    stack.py             the record of what `docker compose up` started, and whether it still runs
    dockerapi.py         Docker's Engine API over its unix socket (no Go binary started)
    safefs.py            directories opened without links, reads that never follow a symlink, atomic writes,
                         bounded walks
    units.py             the one size formatter (host programs and the control side alike)
    netloc.py            the one host:port form, an IPv6 address in brackets (host programs and the control side)
    printable.py         the one escape of control characters in text that came from a host
    names.py             the names host programs and the control side share (directories, files, labels,
                         scripts), the stamp comparison and the rendered-file digest: defined once
"""

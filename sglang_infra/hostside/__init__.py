"""Programs that run on the hosts, not on the control machine.

Standard library only (python3 >= 3.9), except the pull (pull/: hfpull.py and
the modules it imports), which runs in the pull's venv with huggingface_hub;
toolchain_check.py runs inside the serving image (gpu_kernel_check.py too, from
the gate), gateway_launch.py inside the gateway's image with SMG (smg). None
of them imports anything outside this folder; what they share (the manifest
format, the gate's digest, the Docker Engine API) is defined once here and
imported relatively (pull/ imports this folder's modules, never the other way).
The control side ships them with sglang_infra/run/ship.py, which bundles a
program and the modules it imports into one self-contained source. A program
the hosts keep (the gate's scripts and the modules they carry) is part of what
a worker's stamp covers: a change of its text re-gates the worker.

Every module, a line each (tests/unit/test_hostside_index.py keeps the list whole):

    snapshot.py          the one read of a host: everything the deploy compares against, as one JSON document
    codecache.py         the snapshot's compiled code kept by root, keyed by its sources' digest (sent ahead of them)
    settled.py           the settled stamp: root's record of the last run that found the host as its plan wants it
    report.py            the snapshot's report section for status.sh: GPUs, engine, compose, cache, disk, last gate
    cachestate.py        the model cache, read without the Hub (used by snapshot.py)
    manifest.py          the verified-pull record `<home>/verified/<repo folder>/<commit>.json`, and whose it must be
    acl.py               one named user's entry in a directory's POSIX access ACL (the peer door's nginx workers)
    checks.py            readiness, the tool-calling check and the benchmark
    apikey.py            the server's API key: its file's format (read and written here only), its header, redaction
    bounded.py           reads of a server's answer bounded in bytes and in time
    gate.py              the gate: checks after a change, stamp or roll back
    gate_metrics.py      the last gate's result as Prometheus metrics for the node exporter's textfile collector
    nvsmi.py             nvidia-smi -q -x read: the driver, its CUDA, each GPU's persistence, fabric and health
    gpu_metrics.py       each GPU's health as Prometheus metrics for the node exporter's textfile collector
    gpu_kernel_check.py  a CUDA kernel compiled for the GPUs' architecture and run on every GPU (driver API,
                         ctypes), its result checked; the gate runs it inside the serving container
    stamp.py             the gate's contract: the digest of what passed
    stack.py             the record of what `docker compose up` started, and whether it still runs
    repair.py            drift repair below the home, through safefs's walk that never follows a symlink
    put.py               every file the deploy writes, from stdin, checked, never through a link
    dockerapi.py         Docker's Engine API over its unix socket (no Go binary started)
    safefs.py            directories opened without links, reads that never follow a symlink, atomic writes,
                         bounded walks
    units.py             the one size formatter (host programs and the control side alike)
    netloc.py            the one host:port form, an IPv6 address in brackets (host programs and the control side)
    printable.py         the one escape of control characters in text that came from a host
    names.py             the names host programs and the control side share (directories, files, labels,
                         scripts), the stamp comparison and the rendered-file digest: defined once
    gateway_workers.py   a gateway's worker set: workers.json, then the gateway's /workers API
    gateway_launch.py    starts SMG inside the gateway's image, worker set and keys from files
    drain.py             waits until a worker out of its gateways has no request in flight (a roll)
    restore_good.py      the last known-good compose.yaml and .env back, for a worker whose roll was called off
    toolchain_check.py   the pins inside the toolchain image
    doorcheck.py         whether the peer door's address and port are held by the door's own nginx
    pull/                the pull, in the pull's venv: its modules are listed in pull/__init__.py
"""

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
the gate's scripts carry is no part of what a worker's stamp covers (their
command lines are, gate/stamp.py): a change of its text re-gates nothing.

Laid out by what a change costs the hosts. This folder's top holds only the
modules a change of which re-gates every worker, recreates a gateway or
rebuilds the toolchain image: the checks and the modules they carry (the
validation scripts carry them, and their text was in every worker's gate
stamp until issue 60; they are kept here as they were), the gateway's
launcher and the toolchain image's check
(ship.COSTLY; tests/unit/test_tree_shape.py computes the set from ship.py, so
nothing else may lie here). Moving one would change its text or its bundle's
on every converged host. Every other program, kept as a file or run inline per
command, lives in a folder by concern.

Every module and folder, a line each; each folder's __init__.py lists its own modules
(tests/unit/test_hostside_index.py keeps the lists whole):

    read/                the host's reads, run per command: the snapshot, the settled stamp, the cache, the door
    write/               the host's writes, run per command: put, a directory's ACL entry, drift repair, the run's hold
    roll/                the rolling change, run per command: drain, worker sets, the last good back, the detached gate
    gate/                the gate (kept as files): its program, its stamp, its metrics, the status report's section
    gpu/                 the GPUs: nvidia-smi read, their health as metrics, the kernel check the gate runs
    formats/             the forms host programs and the control side share: host:port, sizes, JSON on _json
    pull/                the pull, in the pull's venv, and the verified-pull record

    checks.py            readiness, the tool-calling check and the benchmark
    gateway_launch.py    starts SMG inside the gateway's image, worker set and keys from files
    toolchain_check.py   the pins inside the toolchain image
    apikey.py            the server's API key: its file's format (read and written here only), its header, redaction
    bounded.py           reads of a server's answer bounded in bytes and in time
    stack.py             the record of what `docker compose up` started, and whether it still runs
    dockerapi.py         Docker's Engine API over its unix socket (no Go binary started)
    safefs.py            directories opened without links, reads that never follow a symlink, atomic writes,
                         bounded walks
    printable.py         the one escape of control characters in text that came from a host
    names.py             the names host programs and the control side share (directories, files, labels,
                         scripts), the stamp comparison and the rendered-file digest: defined once
"""

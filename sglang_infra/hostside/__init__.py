"""Programs that run on the hosts, not on the control machine.

Standard library only (python3 >= 3.9), except hfpull.py, which runs in the
pull's venv with huggingface_hub. None of them imports anything outside this
folder; what they share (the manifest format, the gate's digest, the Docker
Engine API) is defined once here and imported relatively. The control side
ships them with sglang_infra/ship.py, which bundles a program and the modules
it imports into one self-contained source.

    snapshot.py         the one read of a host: everything the deploy compares against, as one JSON document
    cachestate.py       the model cache, read without the Hub (used by snapshot.py)
    manifest.py         the verified-pull manifest `<repo>/.sglang/<commit>.json`
    hfpull.py           resumable, verified pulls and pruning (huggingface_hub)
    checks.py           readiness, the tool-calling check and the benchmark
    gate.py             the gate: checks after a change, stamp or roll back
    dockerapi.py        Docker's Engine API over its unix socket (no Go binary started)
    toolchain_check.py  the pins inside the toolchain image
"""

"""The gate run apart from the connection that started it.

    python3 detach.py -- COMMAND [ARG ...]

Starts COMMAND in a session of its own (setsid), stdin /dev/null, its output
into a log of its own under hold.HOLD_DIR (root's), holding GATE_LOCK while
it runs; then follows that log onto this program's stderr until COMMAND ends,
and exits with its exit code. This program ending (its run interrupted, its
SSH connection cut, its machine gone) ends only the following: COMMAND (the
gate, its rollback and its record) runs to its end on the host by itself,
bounded by its own timeouts. The next run's hold (hold.py) waits for
GATE_LOCK, then reads how it ended (the gate's record and stamp); the log
and its exit code stay in HOLD_DIR (a tmpfs) when nobody followed them.
"""

import fcntl
import os
import signal
import subprocess
import sys
import time

from ..write import hold

GATE_LOCK = hold.GATE_LOCK
FOLLOW = 0.2   # seconds between two reads of the log


def _start(command, log_fd, rc_path):
    """The detached side (the child of a fork): its own session, GATE_LOCK held, COMMAND run to its end, its exit
    code written beside the log. Never returns."""
    try:
        os.setsid()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        lock = os.open(GATE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)   # an earlier run's detached gate ends first
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        try:
            code = subprocess.call(command)
        except OSError as error:
            print(f"detach: {command[0]}: {error}", flush=True)
            code = 127
        tmp = f"{rc_path}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.write(out, f"{code}\n".encode())
        os.close(out)
        os.rename(tmp, rc_path)
    finally:
        os._exit(0)


def run(command):
    hold.hold_dir()
    log = os.path.join(hold.HOLD_DIR, f"gate.{os.getpid()}.log")
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND, 0o600)
    rc_path = log + ".rc"
    child = os.fork()
    if child == 0:
        _start(command, log_fd, rc_path)
    os.close(log_fd)
    with open(log, "rb") as handle:
        while True:
            done = os.path.exists(rc_path)
            chunk = handle.read(1 << 16)
            if chunk:
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
                continue
            if done:
                break
            time.sleep(FOLLOW)
    with open(rc_path) as handle:
        code = int(handle.read().strip() or 1)
    os.waitpid(child, 0)
    for path in (log, rc_path):
        os.unlink(path)
    return code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv or not argv[argv.index("--") + 1:]:
        print("usage: detach.py -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    return run(argv[argv.index("--") + 1:])


if __name__ == "__main__":
    sys.exit(main())

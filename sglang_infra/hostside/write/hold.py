"""A run's hold on a host: one run changes a host at a time.

    python3 hold.py take WAIT     the first line of stdin: the holder (JSON: control machine, user, start, doing)
    python3 hold.py show          who holds the host now (JSON), or null

`take` opens HOLD_DIR/deploy.lock (root's, under /run: a reboot frees it)
and takes an exclusive flock on it, waiting at most WAIT seconds; while it
waits it says who holds it ({"waiting": HOLDER}), and when the wait ends it
refuses ({"refused": HOLDER}, exit 3). Then it waits, within the same time,
for GATE_LOCK: a gate an earlier run left going (roll/detach.py) ends first. Held, it writes the holder beside the
lock (deploy.holder), says {"held": ...}, and keeps the lock while the run
that started it sends a line at least every SILENCE seconds on stdin: stdin
ending (the run ended, was killed, its connection cut) or falling silent (its
machine gone) ends this process, and the kernel frees the lock with it. A dead
holder so blocks the host at most SILENCE seconds. A run that reaches one host under
several inventory names (aliases of one SSH target) holds it once: a take whose
holder names the run ("run", a random token of the run's) that holds the lock
now is this run's already, and says {"held": ..., "shared": true}. The lock is the kernel's;
the holder file is only its description (show() reads it only while the lock
is held).
"""

import fcntl
import os
import select
import stat
import sys
import time

from ..formats import jsonio  # json's answers without importing json (and re, enum): every run waits for the hold

HOLD_DIR = "/run/sglang"
LOCK = os.path.join(HOLD_DIR, "deploy.lock")
HOLDER = os.path.join(HOLD_DIR, "deploy.holder")
GATE_LOCK = os.path.join(HOLD_DIR, "gate.lock")   # held by a gate run apart from its run (roll/detach.py)
SILENCE = 60      # seconds without a line from the run that holds the host: it is gone (the run sends one every 5 s)
POLL = 1.0        # seconds between two tries while another run holds the host
MAX_HOLDER = 4096  # bytes of the holder's description, read or written


def hold_dir():
    """HOLD_DIR, made by root 0700 if absent; refused when it is a link, not a directory or not root's alone."""
    try:
        os.mkdir(HOLD_DIR, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(HOLD_DIR)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise OSError(f"{HOLD_DIR} is not a directory root alone may write; move it away")


def _open_lock():
    return os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _read_holder():
    try:
        fd = os.open(HOLDER, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {"said": "another run (it left no description)"}
    try:
        found = jsonio.loads(os.read(fd, MAX_HOLDER) or b"null")
    except ValueError:
        found = None
    finally:
        os.close(fd)
    return found if isinstance(found, dict) else {"said": "another run (its description is unreadable)"}


def _held(path):
    """Whether a process holds ``path``'s lock now; a shared try that succeeds is released at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


GATE_GOING = "the gate of a run that has ended, which goes on by itself on this host"


def show():
    """The holder while a run holds the host (or a gate its run left going), else None; never blocks a run."""
    if not os.path.isdir(HOLD_DIR) or os.path.islink(HOLD_DIR):
        return None
    if _held(LOCK):
        return _read_holder()
    return {"said": GATE_GOING} if _held(GATE_LOCK) else None


def described(found):
    """A holder in words: who, from where, since when, doing what."""
    if not found:
        return "nobody"
    if "user" not in found:
        return str(found.get("said", "another run"))
    return (f"{found.get('user')} on {found.get('control')} since {found.get('since') or found.get('started')} "
            f"(`{found.get('doing')}`)")


def _gate_done(deadline):
    """None once no detached gate (roll/detach.py, of a run that ended before its gate) holds GATE_LOCK; else,
    at the deadline, why the host is still busy."""
    said = False
    while _held(GATE_LOCK):
        what = {"said": GATE_GOING}
        if time.monotonic() >= deadline:
            return what
        if not said:
            _say(waiting=what)
            said = True
        time.sleep(POLL)
    return None


def _say(**what):
    print(jsonio.dumps(what, sort_keys=True), flush=True)


def _holder_line():
    line = b""
    while not line.endswith(b"\n") and len(line) < MAX_HOLDER:
        ready, _, _ = select.select([0], [], [], SILENCE)
        chunk = os.read(0, 1) if ready else b""
        if not chunk:
            break
        line += chunk
    try:
        found = jsonio.loads(line or b"{}")
    except ValueError:
        found = {}
    return {key: str(value)[:200] for key, value in found.items()} if isinstance(found, dict) else {}


def take(wait):
    holder = _holder_line()
    hold_dir()
    fd = _open_lock()
    deadline = time.monotonic() + wait
    said = None
    shared = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            other = _read_holder()
            if holder.get("run") and other.get("run") == holder["run"]:
                # the same run holds this host under another inventory name (aliases of one SSH target): it is
                # this run's already; kept while this name's channel lives, the lock staying with the first
                shared = True
                break
            if time.monotonic() >= deadline:
                _say(refused=other, waited=wait)
                return 3
            if other != said:
                _say(waiting=other)
                said = other
            time.sleep(POLL)
    if shared:
        _say(held=holder, shared=True)
        _kept()
        return 0
    reason = _gate_done(deadline)
    if reason:
        _say(refused=reason, waited=wait)
        return 3
    holder.update(host=os.uname().nodename, pid=str(os.getpid()),   # gethostname()'s answer, without socket's import
                  since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    tmp = f"{HOLDER}.{os.getpid()}"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.write(out, jsonio.dumps(holder, sort_keys=True).encode()[:MAX_HOLDER])
    os.close(out)
    os.rename(tmp, HOLDER)
    _say(held=holder)
    try:
        _kept()
    finally:
        try:
            os.unlink(HOLDER)
        except OSError:
            pass
    return 0


def _kept():
    """Returns once the run that started this process ends, is cut off, or falls silent for SILENCE seconds."""
    while select.select([0], [], [], SILENCE)[0]:
        if not os.read(0, 4096):
            break


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["show"]:
        print(jsonio.dumps(show()))
        return 0
    if argv[:1] == ["take"] and len(argv) == 2:
        try:
            return take(float(argv[1]))
        except OSError as error:
            _say(error=str(error))
            return 1
    print("usage: hold.py take WAIT | show", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

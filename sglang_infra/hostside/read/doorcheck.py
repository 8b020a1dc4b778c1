"""Whether the peer door's address and port are held by the door's own nginx, read as root on the host (the
DoorHeld fact, sglang_infra/operations/peerdoor.py): every socket listening on exactly that address and port belongs
to nginx.service's main process, and that process runs the door's config; and the sha256 of the door's TLS
certificate (its DER bytes, what a TLS client is sent), which every puller of this run pins (hostside/pull/peers.py).
Nothing else is asked: no connection is made, no key is read.

    python3 doorcheck.py ADDRESS PORT CONFIG CERT
        -> one JSON line {"held": bool, "pid": int | None, "why": str, "cert": sha256 hex | None}
"""

import hashlib
import ipaddress
import json
import os
import ssl
import stat
import subprocess
import sys

from ..formats.netloc import netloc

LISTEN = "0A"   # TCP_LISTEN in /proc/net/tcp's st column
TIMEOUT = 30    # seconds, for systemctl
MAX_SOCKETS = 4_000_000   # lines of /proc/net/tcp read at most (a bound; far above any host's sockets)
MAX_CERT_BYTES = 64 * 1024   # a PEM certificate (the door's is under 1 KiB)


def _kernel_hex(address):
    """``address`` as /proc/net/tcp{,6} prints a local address: each 32-bit word of it in the host's byte order."""
    packed = ipaddress.ip_address(address).packed
    return "".join("%08X" % int.from_bytes(packed[i:i + 4], sys.byteorder) for i in range(0, len(packed), 4))


def listening(address, port, net="/proc/net"):
    """The inodes of the sockets listening on exactly ``address``:``port``."""
    table = "tcp6" if ipaddress.ip_address(address).version == 6 else "tcp"
    want = f"{_kernel_hex(address)}:{port:04X}"
    found = []
    try:
        with open(os.path.join(net, table), encoding="ascii") as f:
            for count, line in enumerate(f):   # one line a socket, read as it comes: a busy host has many
                if count > MAX_SOCKETS:
                    break
                fields = line.split()
                if len(fields) > 9 and fields[1] == want and fields[3] == LISTEN:
                    found.append(fields[9])
    except (OSError, ValueError):
        pass
    return found


def main_pid(unit="nginx.service"):
    try:
        out = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True,
                             text=True, timeout=TIMEOUT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out) if out.isdigit() and int(out) > 0 else None


def sockets_of(pid, proc="/proc"):
    """The inodes of the sockets process ``pid`` holds open."""
    held = set()
    folder = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(folder)
    except OSError:
        return held
    for name in names:
        try:
            target = os.readlink(os.path.join(folder, name))
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            held.add(target[8:-1])
    return held


def command_line(pid, proc="/proc"):
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            return f.read(4096).replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def certificate(path):
    """The sha256 (hex) of the DER bytes of the PEM certificate in ``path`` (a regular file, not a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            pem = f.read(MAX_CERT_BYTES).decode("ascii")
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
    except (OSError, ValueError):
        return None


def pair_matches(cert, key):
    """Whether the certificate in ``cert`` and the private key in ``key`` are one pair (ssl's own check, as nginx
    makes it at a reload: a half-replaced pair fails there), both regular files opened without following a link;
    None when either is absent."""
    fds = []
    try:
        for path in (cert, key):
            try:
                fds.append(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK))
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
                return False
        # a password-protected key is no pair of the door's: never a prompt, the callback answers a wrong one
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(*(f"/proc/self/fd/{fd}" for fd in fds),
                                                                 password=lambda: b"-")
        return True
    except (OSError, ValueError):   # ssl.SSLError is an OSError: "key values mismatch", no PEM, a link
        return False
    finally:
        for fd in fds:
            os.close(fd)


def held(address, port, config, pid=None, net="/proc/net", proc="/proc"):
    listen = netloc(address, port)
    inodes = listening(address, port, net)
    if not inodes:
        return {"held": False, "pid": None, "why": f"nothing listens on {listen}"}
    pid = main_pid() if pid is None else pid
    if pid is None:
        return {"held": False, "pid": None, "why": f"{listen} is open but nginx.service has no main process"}
    foreign = [inode for inode in inodes if inode not in sockets_of(pid, proc)]
    if foreign:
        return {"held": False, "pid": pid, "why": f"{listen} is held by another process than nginx.service's "
                                                  f"(pid {pid}): socket inode(s) {', '.join(foreign)}"}
    if config not in command_line(pid, proc):
        return {"held": False, "pid": pid, "why": f"nginx.service's main process (pid {pid}) does not run {config}"}
    return {"held": True, "pid": pid, "why": f"{listen} is held by nginx.service (pid {pid}) running {config}"}


def checked(address, port, config, cert):
    """held(), and the door's certificate's sha256: a door whose certificate cannot be read is not held."""
    found = dict(held(address, port, config), cert=certificate(cert))
    if found["held"] and found["cert"] is None:
        found.update(held=False, why=f"{cert} holds no PEM certificate")
    return found


if __name__ == "__main__":
    print(json.dumps(checked(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])), flush=True)

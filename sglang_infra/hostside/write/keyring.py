"""A vendor's apt keyring made anew, holding exactly its pinned key, never written through a link.

    python3 keyring.py URL DEST FINGERPRINT

Downloads the key at URL (at most openpgp.MAX_BYTES, within TIMEOUT seconds) and reads it as apt would
(read/openpgp.py): it must hold exactly one primary key, whose full fingerprint is FINGERPRINT, with its subkeys
and nothing else. Such a key takes DEST's name (a new file of root's, 0644, written beside it and renamed over
whatever DEST was: a link is replaced, never followed). Anything else is refused, named on stderr, and DEST is
removed: this program runs only when the keyring there is not sound (operations/system.vendor_repository), and apt must
never trust a key that is not the pinned one. DEST's directory is made (root's, 0755) when missing; one that is a
link, or that someone other than root may write, is refused.
"""

import os
import ssl
import stat
import sys
import urllib.request

from .. import safefs
from ..read import openpgp

TIMEOUT = 60   # seconds for the download


class Refused(Exception):
    """The key is not the pinned one, or could not be fetched; the message says why."""


def fetch(url, limit=openpgp.MAX_BYTES, timeout=TIMEOUT):
    """The body at ``url``, at most ``limit`` bytes."""
    # The key is trusted for its fingerprint, not for the connection: the certificate is verified as curl and apt
    # verify it (OpenSSL's defaults), without the stricter X.509 profile Python 3.13 adds (VERIFY_X509_STRICT).
    context = ssl.create_default_context()
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as answer:
            data = answer.read(limit + 1)
    except (OSError, ValueError) as error:
        raise Refused(f"could not download {url}: {error}") from None
    if len(data) > limit:
        raise Refused(f"{url} answered more than {limit} bytes, which is no vendor's key")
    return data


def pinned(data, wanted, source):
    """``data`` when it holds exactly the key ``wanted`` (its subkeys included), else Refused naming ``source``."""
    try:
        found = openpgp.keys(data)
    except ValueError as error:
        raise Refused(f"{source} is not an OpenPGP public key ({error})") from None
    primaries = [fingerprint for fingerprint, _ in found]
    if primaries != [wanted]:
        raise Refused(f"{source} holds the key(s) {', '.join(primaries)}, not exactly the pinned {wanted}")
    return data


def _directory(path):
    """DEST's directory, made when missing; a link or a directory others may write is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.makedirs(path, mode=0o755, exist_ok=True)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise Refused(f"{path} is not a directory of root's that only root may write; nothing was written there")


def install(url, dest, wanted):
    directory = os.path.dirname(os.path.abspath(dest))
    try:
        _directory(directory)
        data = pinned(fetch(url), wanted, f"the key at {url}")
        safefs.write_atomic(dest, data, mode=0o644, owner=(0, 0), verify=True)
    except (Refused, OSError):
        try:
            safefs.unlink_if_present(dest)
        except OSError:
            pass
        raise


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print("usage: keyring.py URL DEST FINGERPRINT", file=sys.stderr)
        return 2
    url, dest, wanted = argv
    try:
        install(url, dest, wanted)
    except (Refused, OSError) as error:
        print(f"refused: {error}; {dest} was removed, so apt trusts no key there", file=sys.stderr)
        return 1
    print(f"{dest} holds the pinned key {wanted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whether each source a host's plan will fetch from answers, asked from the host itself (the preflight's sources
check, run/sources.py). Changes nothing.

    python3 reach.py '{"urls": ["https://...", ...], "timeout": 5}'

Prints one JSON object: each URL mapped to null when it answered (any HTTP status: the server is there) or to
why it did not (cannot resolve, refused, timed out, TLS), a short line. Every URL is asked at once, each bounded
by the timeout for its connection and its answer's first line; no body is read.
"""

import json
import ssl
import sys
import threading
import urllib.error
import urllib.request

MAX_URLS = 16
REASON_CHARS = 200


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer: the source is there; following it would ask another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def tls_context():
    """The system's trust, checked as apt and curl check it: Python 3.13 turned on strict X.509 checks by default,
    which refuse certificates they accept (a site CA's without an Authority Key Identifier)."""
    context = ssl.create_default_context()
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    return context


def ask(url, timeout):
    """None when ``url`` answers with any HTTP status within ``timeout`` seconds, else why not."""
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=tls_context()))
    request = urllib.request.Request(url, method="GET", headers={"Range": "bytes=0-0"})
    try:
        with opener.open(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as error:
        reason = error.reason
    except (OSError, ValueError) as error:   # socket.timeout is an OSError
        reason = error
    text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    return " ".join(str(text).split())[:REASON_CHARS]


def main(spec):
    urls = [u for u in spec.get("urls", []) if isinstance(u, str)][:MAX_URLS]
    timeout = float(spec.get("timeout", 5))
    found = {}

    def one(url):
        found[url] = ask(url, timeout)

    threads = [threading.Thread(target=one, args=(url,), daemon=True) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * timeout + 1)
    # A URL whose thread is still stuck (a resolver that ignores the timeout) did not answer in time.
    return {url: found[url] if url in found else f"no answer in {timeout:g} s" for url in urls}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))

#!/usr/bin/env python3
"""Resumable, verified model pulls into huggingface_hub's own cache layout.

Shipped to each host (sglang_infra/run/ship.py bundles it with the modules it
imports: pull.py, transfer.py, prune.py, pull_locks.py, pull_errors.py,
manifest.py, ranges.py and the rest) and run there as the service account
with a venv python that has huggingface_hub installed. This file is the
command line only; the pull is pull.py, its HTTP transfer transfer.py, its
locks pull_locks.py, pruning prune.py, and the exit codes and error messages
pull_errors.py.

    python hfpull.py pull  --cache-dir DIR --records-dir DIR --repo-id ORG/NAME --revision REV
                           [--endpoint URL] [--token-file PATH] [--lock-wait S] [--workers N] [--min-free BYTES]
                           [--peer ADDR:PORT=SHA256 ... --peer-key-file PATH [--peer-seed] [--peer-wait S]]
    python hfpull.py prune --cache-dir DIR --records-dir DIR --keep ORG/NAME@COMMIT [--keep ...] [--dry-run]

Why not `hf download`: huggingface_hub writes every download to a temp file
unique to the process (`blobs/<etag>.<8 hex>.incomplete`), so a killed download
neither resumes nor cleans up after itself. This script keeps the library's
layout (blob names, relative snapshot links, refs) and its metadata calls, and
adds what a fleet needs:

* one deterministic partial per blob (`blobs/<etag>.incomplete`) resumed with
  HTTP Range requests; the library's own orphaned temp files are adopted as
  the resume base;
* up to N files at once, and a large file as several byte ranges over several
  connections, N connections in all (the Hub and its CDN throttle each
  connection, not the link), the earliest file's ranges first (transfer.RangePool):
  see ranges.py for how the ranges are cut and how what each holds survives a
  kill. The first failure stops every worker; a transient one (a cut, a 5xx, a
  429 with its Retry-After) is retried from the range's last byte with backoff;
* room first: a revision whose missing bytes, plus --min-free, are more than the cache's filesystem has free is
  refused before a byte of it is fetched; a disk that fills while the pull writes (another writer) ends it
  naming the disk, its partials kept for the next run to resume;
* size and hash verification of every blob (sha256 for LFS files, git-sha1 for
  regular ones), with a record `<records dir>/<repo folder>/<commit>.json`
  written only once every file of the revision is verified, outside hf-cache,
  where no member of the group can write (manifest.py). A later pull whose
  record still matches the disk (inode, size and ctime of every blob) makes no
  request at all;
* for a model the fleet serves, each file from the peers of the fleet that
  already hold it verified, byte ranges from several at once, verified as a Hub
  file is, the Hub as the fallback (peers.py);
* with the lock's record of the revision on stdin (--locked-stdin), the lock's
  file list instead of the Hub's: no request for the model's info nor for its
  listing; a gated model (or one the lock does not say is not) is taken from a
  peer only after the Hub accepted this host's token for it (one access check);
* the same per-blob lock file as huggingface_hub (`<cache>/.locks/<repo
  folder>/<etag>.lock`, flock), so a hand pull by an admin and this script never
  write the same blob at once, plus a per-repo lock for whole pulls.

Exit codes: 0 ok, 2 usage, 3 Hub/network/IO error, 4 verification failure,
5 another pull holds the repo lock past the wait limit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import httpx2  # huggingface_hub's own HTTP client (hard dependency of huggingface_hub 2.x)
from huggingface_hub import set_client_factory
from huggingface_hub.errors import HfHubHTTPError

from . import manifest, peers, prune, pull, transfer
from .pull_errors import (
    EXIT_OK,
    EXIT_REMOTE,
    EXIT_USAGE,
    EXIT_VERIFY,
    PullError,
    Retryable,
    describe_error,
    unreachable,
)
from .pull_locks import DEFAULT_LOCK_WAIT


def read_token(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise PullError(f"cannot read the token file {path}: {e.strerror}", EXIT_USAGE)
    return token or None


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= pull.MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"wants an integer 1-{pull.MAX_WORKERS}, got {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hfpull.py", description="Resumable, verified pulls into the HF cache.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pull", help="pull one revision of a model repo")
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--records-dir", required=True,
                   help="where the records of verified revisions are kept: the account's alone, outside the cache")
    p.add_argument("--repo-id", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--token-file", default=None)
    p.add_argument("--lock-wait", type=float, default=DEFAULT_LOCK_WAIT,
                   help="seconds to wait for another pull of the same repo (default 1800)")
    p.add_argument("--locked-stdin", action="store_true",
                   help="read the lock's record of this revision (JSON) from stdin: its files are the listing (no "
                        "request for the model's info or tree) and every file is verified against it; with a "
                        "\"share\" list of paths in it, pull only those (a swarm's first round), recorded as "
                        "verified in part; its \"gated\" says whether peers need the Hub's access check first")
    p.add_argument("--workers", type=_workers, default=pull.DEFAULT_WORKERS,
                   help=f"files and connections at once (default {pull.DEFAULT_WORKERS}, at most {pull.MAX_WORKERS})")
    p.add_argument("--min-free", type=int, default=0, metavar="BYTES",
                   help="bytes to leave free on the cache's filesystem: a revision whose missing files would leave "
                        "less is refused before a byte of it is fetched (default 0)")
    p.add_argument("--peer", action="append", default=[], metavar="ADDR:PORT=SHA256",
                   help="a peer door that may hold this model's blobs, with the sha256 of its TLS certificate, the "
                        "only one trusted there (repeat); needs --peer-key-file")
    p.add_argument("--peer-key-file", default=None, help="the site key, in a file of this account's alone (0600)")
    p.add_argument("--peer-seed", action="store_true", help="take the Hub at once for a blob no peer holds")
    p.add_argument("--peer-wait", type=float, default=600.0,
                   help="seconds to wait for a peer to hold a blob before the Hub takes it (default 600)")
    q = sub.add_parser("prune", help="delete every cached model revision not kept")
    q.add_argument("--cache-dir", required=True)
    q.add_argument("--records-dir", required=True, help="the pull's records; those of removed revisions go too")
    q.add_argument("--keep", action="append", default=[], metavar="ORG/NAME@COMMIT")
    q.add_argument("--dry-run", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.umask(0o002)
    set_client_factory(transfer.bounded_client)
    if args.cmd == "prune":
        try:
            result = prune.prune(args.cache_dir, args.keep, args.dry_run, args.records_dir)
        except PullError as e:
            print(f"prune failed: {e}", file=sys.stderr, flush=True)
            return e.code
        except OSError as e:
            print(f"prune failed: {e}", file=sys.stderr, flush=True)
            return EXIT_REMOTE
        pull.say("SGLANG_PRUNE_RESULT " + json.dumps(result, sort_keys=True))
        return EXIT_OK

    where = f"(repo {args.repo_id}, revision {args.revision})"
    if args.repo_id.count("/") != 1 or not all(args.repo_id.split("/")):
        print(f"pull failed: --repo-id wants ORG/NAME {where}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    puller = None
    try:
        token = read_token(args.token_file)
        puller = pull.Puller(args.cache_dir, args.repo_id, args.revision, args.endpoint, token, args.lock_wait,
                             args.workers, records_dir=args.records_dir, min_free=max(0, args.min_free))
        if args.peer and args.peer_key_file:
            puller.fleet = peers.Fleet([peers.parse_peer(a) for a in args.peer], peers.read_key(args.peer_key_file),
                                       args.peer_seed, args.peer_wait)
        if args.locked_stdin:
            try:
                puller.expect_lock(json.loads(sys.stdin.read(manifest.MAX_BYTES)))
            except (ValueError, KeyError, TypeError) as e:
                raise PullError(f"the lock's record on stdin is not usable: {e}", EXIT_USAGE)
        result = puller.run()
    except KeyboardInterrupt:
        print(f"pull interrupted {where}", file=sys.stderr, flush=True)
        return 130
    except PullError as e:
        msg = puller.redact(str(e)) if puller else str(e)
        kind = "verification failed" if e.code == EXIT_VERIFY else "pull failed"
        print(f"{kind}: {msg} {where}", file=sys.stderr, flush=True)
        return e.code
    except (HfHubHTTPError, httpx2.HTTPError, OSError, Retryable) as e:
        msg, code = describe_error(e, args.endpoint)
        if puller:
            msg = puller.redact(msg)
        if unreachable(e, args.endpoint):  # what this pull changed in the cache, if anything
            msg += ("; nothing was fetched" if puller is None or not puller.stats.bytes_fetched else
                    "; what it fetched is kept, and the next run resumes it")
        print(f"pull failed: {msg} {where}", file=sys.stderr, flush=True)
        return code
    pull.say("SGLANG_PULL_RESULT " + json.dumps(result, sort_keys=True))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""A STAND-IN package index for tests, not a mirror of any real one.

The real flashinfer wheels need torch and come from flashinfer's own GPU wheel
index, which these machines cannot reach, and flashinfer-cubin alone is over a
gigabyte. The image build under test only needs pip to find, under the real
distribution names and versions, wheels whose installed metadata the check
script then reads. So `build_wheels` writes tiny pure-python wheels (a module
with `__version__`, a correct WHEEL, METADATA and RECORD with sha256 hashes)
and `WheelIndex` serves a directory of them with pypiserver, on 127.0.0.1 by
default.

What pip does with a wheel that lies about its version, measured with pip
23.2.1 and 26.3 (this project's venv before and after pypiserver's pip>=26
requirement) and 25.1.1 (Debian trixie's python3-pip, the stand-in image's):

* filename version != METADATA version (`metadata_version_override`): all
  three discard the wheel ("Requested flashinfer-jit-cache==0.6.14+cu130 from
  ... has inconsistent version: expected '0.6.14+cu130', but metadata has
  '0.6.13+cu130'") and, when no other index offers the pin, fail with "No
  matching distribution found". The image build then fails and the image
  already under the tag is kept. Caveat: when another index in the same pip
  run also offers that version (pip's default index has the real
  flashinfer-python 0.6.14), pip silently falls back to that one and the build
  succeeds with the genuine package.
* a consistent wheel whose version carries a local label the pin lacks
  (flashinfer-python 0.6.14+rebuilt against ==0.6.14): all three install it,
  since PEP 440 lets `==0.6.14` match any local label, and prefer it over a
  plain 0.6.14 because it sorts higher. Only the image's check script, which
  compares installed versions exactly, catches this one. flashinfer-jit-cache
  is always pinned with its local label (+cu130), which `==` matches exactly,
  so this variant applies to flashinfer-python and flashinfer-cubin.

Build tag: pip's default index also carries flashinfer-python 0.6.14 (the real
one), and a build that lists this stand-in as an extra index sees both. For
otherwise equal wheels pip takes the one with the higher build tag (the wheel
spec's tie-breaker), so the stand-in wheels carry build tag "1" by default and
win that tie by rule rather than by the order pip happens to list indexes in.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

# Real distribution name -> the top-level module its wheel ships.
MODULES = {
    "flashinfer-python": "flashinfer",
    "flashinfer-cubin": "flashinfer_cubin",
    "flashinfer-jit-cache": "flashinfer_jit_cache",
}
STAND_IN_MARK = "STAND_IN = True"
DEFAULT_BUILD_TAG = "1"
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed, so the same input gives the same bytes


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_name(name: str) -> str:
    """The distribution name as wheel filenames spell it (PEP 427: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_filename(name: str, version: str, build_tag: str | None = DEFAULT_BUILD_TAG) -> str:
    build = f"-{build_tag}" if build_tag else ""
    return f"{_wheel_name(name)}-{version}{build}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _wheel_bytes(name: str, version: str, metadata_version: str, build_tag: str | None,
                 rebuilt: bool = False) -> bytes:
    module = MODULES.get(_canonical(name), _wheel_name(name))
    dist_info = f"{_wheel_name(name)}-{version}.dist-info"
    wheel_lines = ["Wheel-Version: 1.0", "Generator: sglang-infra stand-in index",
                   "Root-Is-Purelib: true", "Tag: py3-none-any"]
    if build_tag:
        wheel_lines.append(f"Build: {build_tag}")
    files = {
        f"{module}/__init__.py": (
            f'"""STAND-IN for {name} {version} (tests only: no kernels, no torch)."""\n'
            f"{STAND_IN_MARK}\n__version__ = {metadata_version!r}\n"
            + ("# rebuilt: other bytes under the same name and version\n" if rebuilt else "")
        ).encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {name}\n"
            f"Version: {metadata_version}\n"
            "Summary: Stand-in wheel for tests of the image build; not the real package.\n"
        ).encode(),
        f"{dist_info}/WHEEL": ("\n".join(wheel_lines) + "\n").encode(),
        f"{dist_info}/top_level.txt": f"{module}\n".encode(),
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def build_wheels(directory: Path | str, packages: Mapping[str, str], *,
                 metadata_version_override: Mapping[str, str] | None = None,
                 build_tag: str | None = DEFAULT_BUILD_TAG, rebuilt: Iterable[str] = ()) -> list[Path]:
    """Write one stand-in wheel per {distribution name: version} into directory.

    metadata_version_override {name: version} makes that wheel's METADATA (and
    its module's __version__) claim another version than its filename: the
    "index hands out a wheel that is not what it says" case, which pip refuses.
    rebuilt names packages whose wheel gets other bytes under the same file
    name and version: what a lock's hash catches.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    overrides = {_canonical(k): v for k, v in (metadata_version_override or {}).items()}
    unknown = set(overrides) - {_canonical(n) for n in packages}
    if unknown:
        raise ValueError(f"metadata_version_override names packages not built: {sorted(unknown)}")
    written = []
    for name, version in packages.items():
        path = directory / wheel_filename(name, version, build_tag)
        path.write_bytes(_wheel_bytes(name, version, overrides.get(_canonical(name), version), build_tag,
                                      _canonical(name) in {_canonical(n) for n in rebuilt}))
        written.append(path)
    return written


def free_port(host: str) -> int:
    """A port the OS reports free on host now (another process may still take it before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class WheelIndexError(RuntimeError):
    pass


class WheelIndex:
    """pypiserver over a directory of stand-in wheels, as a subprocess.

    The directory is rescanned on every request (simple-dir backend), so
    `serve()` swaps what the index hands out without a restart. Fallback to
    any other index is disabled: a name the stand-in lacks is a 404.
    """

    def __init__(self, directory: Path | str, host: str = "127.0.0.1", port: int = 0,
                 *, ready_timeout: float = 30.0, python: str = sys.executable):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or free_port(host)
        self.ready_timeout = ready_timeout
        self.python = python
        self.log_path = self.directory.parent / f"{self.directory.name}.pypiserver.log"
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The simple (PEP 503) index URL, for pip's --index-url / --extra-index-url."""
        return f"http://{self.host}:{self.port}/simple/"

    def serve(self, packages: Mapping[str, str], *, extra_wheels: Iterable[Path | str] = (),
              **options) -> list[Path]:
        """Replace the served wheels by stand-ins for packages (options as for build_wheels).

        extra_wheels are copied in as they are: e.g. real wheels fetched once
        with `pip download`, so that many builds need no download of their own.
        """
        for old in self.directory.glob("*.whl"):
            old.unlink()
        written = build_wheels(self.directory, packages, **options)
        for wheel in extra_wheels:
            written.append(Path(shutil.copy2(wheel, self.directory / Path(wheel).name)))
        return written

    def start(self) -> "WheelIndex":
        if self._proc is not None:
            return self
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                [self.python, "-m", "pypiserver", "run", "--host", self.host, "--port", str(self.port),
                 "--disable-fallback", "--backend", "simple-dir", "--hash-algo", "sha256",
                 "--server", "wsgiref", str(self.directory)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last_error = "no answer yet"
        for _ in range(int(self.ready_timeout / 0.2) + 1):
            if self._proc.poll() is not None:
                raise WheelIndexError(f"pypiserver exited with {self._proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last_error = str(error)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        self.stop()
        raise WheelIndexError(f"pypiserver did not answer at {self.url} within {self.ready_timeout:.0f}s "
                              f"({last_error}): {self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> "WheelIndex":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def clear(self) -> None:
        """Remove the served wheels and the log."""
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.log_path.exists():
            os.unlink(self.log_path)

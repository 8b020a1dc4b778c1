"""STAND-IN for the Hugging Face Hub, for tests and the sandbox only.

`server.py` is a single standard-library file so it can also be copied into a
container and run there with the system python3. Production code never
imports this package.
"""

from .server import StandinHub, build_repos, load_spec

__all__ = ["StandinHub", "build_repos", "load_spec"]

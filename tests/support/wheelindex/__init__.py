"""A STAND-IN Python package index for tests: tiny wheels under the real
flashinfer distribution names, served by pypiserver. See index.py."""

from .index import WheelIndex, build_wheels, wheel_filename

__all__ = ["WheelIndex", "build_wheels", "wheel_filename"]

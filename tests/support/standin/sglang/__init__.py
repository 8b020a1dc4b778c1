"""STAND-IN package: lets `python3 -m sglang.launch_server` start the stand-in server (tests only)."""

"""STAND-IN for `python3 -m sglang.launch_server`: starts tests/support/standin/standin_server.py."""

import sys

from standin_server import main

sys.exit(main())

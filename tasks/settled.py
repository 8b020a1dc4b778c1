"""A settled host: its state and its plan are what the last run that changed nothing found and stamped
(sglang_infra/settled.py), so no operation is planned; one line says so."""

from pyinfra import host

host.noop("settled: the host's snapshot and plan match the stamp of its last run that changed nothing; "
          "no operation planned")

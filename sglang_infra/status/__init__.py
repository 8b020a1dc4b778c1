"""The fleet status report (scripts/status.sh): the command (fleetstatus.py), each host's row written inside the
report's dry run (statusrows.py), and a multi-node group judged whole or failing (groupstatus.py).
"""

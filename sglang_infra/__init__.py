"""Facts, operations, validation and rendering for the SGLang host deploy."""

# The runbook names the service account and its group `sglang`; every host of
# the fleet uses the same name, so it is not a data key.
ACCOUNT = "sglang"

# The production group serves the runbook's production model. It matches the
# defaults in all.py; the key is repeated so the group's purpose is explicit.

# Production model: passes the tool-calling test, ~985 tok/s aggregate at 8 concurrent requests.
sglang_model = "qwen3.6-35b-a3b-awq"

# The quality group serves the dense model kept for quality comparison
# against the production MoE model.

# Quality-comparison model: passes the tool-calling test, ~452 tok/s aggregate at 8 concurrent requests.
sglang_model = "qwen3.6-27b-awq-int4"

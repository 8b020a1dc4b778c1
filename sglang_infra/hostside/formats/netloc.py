"""The one host:port form, for host programs and the control side alike: an IPv6 address in brackets
(`[fd00::1]:880`), an IPv4 address or a name as it is (`10.0.0.5:880`), as URLs, nginx's listen and Prometheus'
targets take it.

report.py writes the same form on its own: it is carried by the gate's scripts (gate_metrics.py imports it), whose
text a worker's stamp covers, so importing this module there would re-gate every converged worker.
"""


def netloc(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"

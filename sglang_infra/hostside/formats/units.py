"""One way to print a size, for the whole project (host programs and the control side alike)."""


def human(n):
    """Bytes in binary units: 512 B, 1.5 KiB, 3.2 GiB."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover

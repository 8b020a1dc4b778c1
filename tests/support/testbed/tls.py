"""The testbed's own CA (tests only) and the server certificates it signs: the stand-in Hub's HTTPS listener and
the registry (tests/support/testbed/registry.py). Production never trusts it."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from testbed import hosts

# The Hub was its first user, hence the name; every testbed TLS server shares this one CA.
CA_DIR = hosts.CACHE_DIR / "hfstandin-ca"
_VALID = datetime.timedelta(days=3650)


def test_ca(ca_dir: Path | None = None) -> tuple[Path, Path]:
    """This machine's CA for the testbed's HTTPS servers (tests only), made once: (certificate, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_dir = ca_dir or CA_DIR
    cert, key = ca_dir / "ca.pem", ca_dir / "ca.key"
    if cert.is_file() and key.is_file():
        return cert, key
    ca_dir.mkdir(parents=True, exist_ok=True)
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sglang-testbed stand-in CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    issued = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
              .not_valid_after(now + _VALID)
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .sign(private, hashes.SHA256()))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    cert.write_bytes(issued.public_bytes(serialization.Encoding.PEM))
    return cert, key


def issue(ca: tuple[Path, Path], common_name: str, *, dns_names=(), ip_addresses=()) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for a server named ``common_name``, signed by ``ca`` (test_ca()), valid for
    ``dns_names`` and ``ip_addresses`` (Go clients such as Docker check only these SANs, never the CN)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_cert = x509.load_pem_x509_certificate(ca[0].read_bytes())
    ca_key = serialization.load_pem_private_key(ca[1].read_bytes(), None)
    private = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    names = [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    issued = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
              .issuer_name(ca_cert.subject).public_key(private.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
              .not_valid_after(now + _VALID)
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .sign(ca_key, hashes.SHA256()))
    return (issued.public_bytes(serialization.Encoding.PEM),
            private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))

"""Certificates a Braid cluster needs, made with the ``cryptography`` package.

``braid certs create --dir DIR --regions r1,r2,r3`` writes, into DIR::

    ca.crt  ca.key              the cluster CA: it signs everything below and is what
                                every region and client trusts
    <region>.crt  <region>.key  one per region, for its client port (server use) and its
                                replication/admin links (server and client use); the common
                                name and a DNS subjectAltName are the region's name, which is
                                how a peer proves which region it is
    admin.crt  admin.key        braid-admin's client certificate (CN ``braid-admin``)
    client.crt  client.key      a client certificate for applications (CN ``client``)

Keys are ECDSA P-256 (small, fast handshakes, understood by OpenSSL, grpc and every Redis
client) and are written readable by the owner only.  A region's subjectAltNames also list
the ``--hosts`` names and addresses (default ``localhost`` and ``127.0.0.1``), so a client
that checks the host name accepts it.

The same functions serve tests that need odd certificates: another CA, an expired
certificate, a certificate naming the wrong region.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from node.security import ADMIN_NAME

DEFAULT_DAYS = 825  # the longest validity common clients accept for a server certificate
DEFAULT_HOSTS = ("localhost", "127.0.0.1")
CLIENT_NAME = "client"


@dataclass(slots=True)
class Issued:
    """A certificate and its private key, in memory."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self, password: bytes | None = None) -> bytes:
        enc = (serialization.BestAvailableEncryption(password) if password
               else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)

    def write(self, directory: str, stem: str, password: bytes | None = None) -> tuple[str, str]:
        """Write ``stem.crt`` and ``stem.key`` (mode 0600); return their paths."""
        crt = os.path.join(directory, f"{stem}.crt")
        key = os.path.join(directory, f"{stem}.key")
        _write(crt, self.cert_pem(), 0o644)
        _write(key, self.key_pem(password), 0o600)
        return crt, key


def _write(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(name: str = "Braid cluster CA", days: int = 3650) -> Issued:
    """A self-signed CA certificate and key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(ca: Issued, name: str, *, hosts: tuple[str, ...] | list[str] = (), server: bool = True,
          client: bool = True, days: int = DEFAULT_DAYS,
          not_before: dt.datetime | None = None, not_after: dt.datetime | None = None) -> Issued:
    """A certificate for ``name`` signed by ``ca``.

    ``name`` is the common name and the first DNS subjectAltName; ``hosts`` adds DNS names
    and IP addresses.  ``not_before``/``not_after`` override the validity (tests make
    expired certificates with them).
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(name)]
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            if h != name:
                sans.append(x509.DNSName(h))
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - dt.timedelta(minutes=5))
        .not_valid_after(not_after or now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False),
                       critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def load(cert_path: str, key_path: str, password: bytes | None = None) -> Issued:
    """Read a certificate and its key back (``braid certs`` issues more from an existing CA)."""
    with open(cert_path, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    with open(key_path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: not an EC private key")
    return Issued(cert, key)


@dataclass(slots=True)
class ClusterCerts:
    """Paths of what ``create_cluster_certs`` wrote."""

    directory: str
    ca: str
    regions: dict[str, tuple[str, str]]  # region -> (cert, key)
    admin: tuple[str, str]
    client: tuple[str, str]


def create_cluster_certs(directory: str, regions: list[str], *, hosts: list[str] | tuple[str, ...] = DEFAULT_HOSTS,
                         days: int = DEFAULT_DAYS, force: bool = False) -> ClusterCerts:
    """Make the cluster CA (or reuse the one in ``directory``) and every certificate.

    An existing ``ca.crt``/``ca.key`` is kept, so certificates for a new region or a renewal
    are signed by the CA the cluster already trusts; an existing region certificate is
    kept unless ``force`` is given.
    """
    if not regions:
        raise ValueError("name at least one region")
    for r in regions:
        if not r or "/" in r or r.startswith("."):
            raise ValueError(f"invalid region name {r!r}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca_crt, ca_key = os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")
    if os.path.exists(ca_crt) and os.path.exists(ca_key):
        ca = load(ca_crt, ca_key)
    else:
        ca = make_ca()
        ca.write(directory, "ca")

    def made(stem: str, **kw) -> tuple[str, str]:
        crt, key = os.path.join(directory, f"{stem}.crt"), os.path.join(directory, f"{stem}.key")
        if not force and os.path.exists(crt) and os.path.exists(key):
            return crt, key
        return issue(ca, **kw).write(directory, stem)

    paths = {r: made(r, name=r, hosts=list(hosts), days=days) for r in regions}
    admin = made("admin", name=ADMIN_NAME, server=False, days=days)
    client = made("client", name=CLIENT_NAME, server=False, days=days)
    return ClusterCerts(directory, ca_crt, paths, admin, client)


def names_in(cert: x509.Certificate) -> set[str]:
    """The names a certificate stands for: its common name and its DNS subjectAltNames."""
    names = {a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME) if isinstance(a.value, str)}
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names.update(ext.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        pass
    return names

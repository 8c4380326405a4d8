"""``braid certs create``: a cluster CA and certificates that OpenSSL accepts for what they are for."""

from __future__ import annotations

import datetime as dt
import os
import ssl
import stat

from cryptography import x509

from node.security import certs
from node.tools.cli import main as braid


def test_braid_certs_create_makes_a_ca_and_one_certificate_per_region(tmp_path, capsys):
    d = str(tmp_path / "tls")
    assert braid(["certs", "create", "--dir", d, "--regions", "region-1,region-2",
                  "--hosts", "localhost,10.1.2.3"]) == 0
    out = capsys.readouterr().out
    assert "cluster CA" in out and "region-2" in out
    for stem in ("ca", "region-1", "region-2", "admin", "client"):
        assert os.path.exists(os.path.join(d, f"{stem}.crt"))
        mode = stat.S_IMODE(os.stat(os.path.join(d, f"{stem}.key")).st_mode)
        assert mode == 0o600, (stem, oct(mode))
    with open(os.path.join(d, "region-2.crt"), "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    assert certs.names_in(cert) == {"region-2", "localhost"}
    ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.IPAddress)
    assert [str(i) for i in ips] == ["10.1.2.3"]
    # OpenSSL takes the chain: a server context with the region's pair, a client trusting the CA
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(os.path.join(d, "region-1.crt"), os.path.join(d, "region-1.key"))
    client = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
    client.load_cert_chain(os.path.join(d, "client.crt"), os.path.join(d, "client.key"))


def test_a_second_run_keeps_the_ca_and_signs_new_regions_with_it(tmp_path):
    d = str(tmp_path)
    first = certs.create_cluster_certs(d, ["a"])
    with open(first.ca, "rb") as f:
        ca_before = f.read()
    second = certs.create_cluster_certs(d, ["a", "b"])
    with open(second.ca, "rb") as f:
        assert f.read() == ca_before
    ca = x509.load_pem_x509_certificate(ca_before)
    with open(second.regions["b"][0], "rb") as f:
        b = x509.load_pem_x509_certificate(f.read())
    b.verify_directly_issued_by(ca)  # raises when another key signed it


def test_expired_and_foreign_certificates_can_be_made_for_tests():
    ca, other = certs.make_ca(), certs.make_ca("another CA")
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    old = certs.issue(ca, "region-1", not_before=past, not_after=past + dt.timedelta(days=1))
    assert old.cert.not_valid_after_utc < dt.datetime.now(dt.UTC)
    foreign = certs.issue(other, "region-1")
    try:
        foreign.cert.verify_directly_issued_by(ca.cert)
    except Exception:  # noqa: BLE001 - any verification failure is what we expect
        pass
    else:
        raise AssertionError("a certificate of another CA verified against the cluster CA")


def test_bad_region_names_are_refused(tmp_path, capsys):
    assert braid(["certs", "create", "--dir", str(tmp_path), "--regions", "../x"]) == 2
    assert "invalid region name" in capsys.readouterr().err

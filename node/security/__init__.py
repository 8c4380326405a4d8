"""Security: certificates, TLS contexts for clients and links, users and permissions."""

# The common name of braid-admin's client certificate (certs.py issues it; the admin service
# admits it beside the regions' own, node/transport/admin.py)
ADMIN_NAME = "braid-admin"

"""Security: certificates, TLS contexts for clients and links, users and permissions."""

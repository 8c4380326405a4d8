"""gRPC between regions and to braid-admin: the only package that imports grpc.

grpc_links.py moves the replication hub's frames (node/activeactive/hub.py, which holds the
links' logic without gRPC, so the simulation runs it over a network of its own) over gRPC;
admin.py serves and calls the admin service (admin_types.py: what both sides of it name,
without gRPC); tls.py makes the mutual-TLS credentials of both.
"""

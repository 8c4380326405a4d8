"""Links between regions and the admin service.

replication.py holds the replication hub and its links' logic, without gRPC (the simulation
runs it over a network of its own); grpc_links.py moves its frames over gRPC, and admin.py
serves and calls the admin service.  Those two are the only modules that import grpc; the
rest of the region sees plain Python calls (admin_types.py: what both sides of the admin
service name, without gRPC).
"""

"""Everything that speaks gRPC: replication links between regions and the admin service.

No other package imports grpc; the rest of the region sees plain Python calls.
"""

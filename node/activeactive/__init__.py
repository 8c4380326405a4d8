"""The region's part in an Active-Active database: the hub and its links (without gRPC),
the operations' wire codec, the backlog, recovery, membership and the cluster file."""

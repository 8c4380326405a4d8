"""A region's own durability: the operation log (append-only file), snapshots, the state
schema they share, replay at start-up and the membership promise kept on disk."""

"""A region without sockets: the sans-IO core, the keyspace, blocked clients, sessions'
settings, the slow log, supervision of background work, long commands in slices."""

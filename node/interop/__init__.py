"""Redis's formats: the RDB stream codec (DUMP/RESTORE), whole RDB files, listpacks, LZF,
and ``braid import`` / ``braid export``."""

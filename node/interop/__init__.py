"""Redis's formats: the RDB stream codec (DUMP/RESTORE), whole RDB files, listpacks and LZF
(``braid import`` / ``braid export`` use them: node/tools/import_export.py)."""

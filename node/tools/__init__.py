"""The command-line programs: ``braid`` (node, up/down/restart, import/export, logs) and
``braid-admin``."""

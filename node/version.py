"""Braid's version, and the Redis release it answers as: written here only.

``pyproject.toml`` reads ``BRAID_VERSION`` for the package's metadata
(``[tool.setuptools.dynamic]``, which parses this file without importing it), and the
server reports both constants (INFO server, HELLO, the ``braid_info`` metric), and ``braid``,
``braid-admin`` and ``braid-chaos`` print them for ``--version`` (:data:`VERSION_TEXT`).  This
module imports nothing, so anything can import it without pulling in the server.
"""

BRAID_VERSION = "0.2.0"
REDIS_COMPAT_VERSION = "8.10.2"  # the Redis release whose stream commands Braid implements

# what `braid --version` (and braid-admin's, braid-chaos's) prints: argparse fills in %(prog)s
VERSION_TEXT = f"%(prog)s {BRAID_VERSION} (Redis {REDIS_COMPAT_VERSION} streams)"

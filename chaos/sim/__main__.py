"""``python -m chaos.sim ...`` is ``braid-chaos sim ...``."""

import sys

from . import cli_main

sys.exit(cli_main())

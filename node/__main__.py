import sys

from node.tools.cli import main

sys.exit(main())

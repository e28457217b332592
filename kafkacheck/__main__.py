"""``python -m kafkacheck``: the command line."""

import sys

from kafkacheck.cli import main

sys.exit(main())

"""``python -m speedtronic`` runs the CLI."""

import sys

from speedtronic.cli import main

sys.exit(main())

"""``python -m speedtronic`` runs the CLI."""

import sys

from speedtronic.commands.cli import main

sys.exit(main())

"""Subcommands of the ``speedtronic`` CLI, one module each (see ``speedtronic.commands.cli``)."""

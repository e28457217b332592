"""The commands of ``kafkacheck``, one module each.

Every module has ``add_parser(sub)``, which adds its subcommand's parser (options, help,
epilog), and ``main(args) -> int``, which runs it and returns the exit code
(:mod:`kafkacheck.exits`). A new command is one new module and one entry in ``COMMANDS``,
in the order ``kafkacheck --help`` lists them. Modules import what only running needs
inside ``main``, so that ``--help`` stays quick.
"""

from __future__ import annotations

import importlib
from types import ModuleType

COMMANDS = ("run", "check", "hunt", "explore", "lin", "import-jepsen", "corpus", "extract", "serve",
            "conform", "differential", "kafka", "analyze", "model-check")


def command(name: str) -> ModuleType:
    """The module of command ``name``."""
    return importlib.import_module(f"kafkacheck.commands.{name.replace('-', '_')}")

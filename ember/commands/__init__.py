"""The subcommands of the ``ember`` command, one module each: ``add_parser(subparsers)`` registers
it (with ``func=run``), ``run(args) -> exit status`` does it. ``ember.cli`` dispatches."""

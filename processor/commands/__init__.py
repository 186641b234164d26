"""One module per ``ivm`` subcommand (see ``processor/cli.py``)."""

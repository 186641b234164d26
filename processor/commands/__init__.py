"""One module per ``ivm`` subcommand (see ``ivm/processor/cli.py``)."""

"""One module per ``paw-gym`` subcommand (see ``training.cli.COMMAND_MODULES``)."""

"""One module per ``paw-gym`` subcommand (see ``training.cli.COMMAND_MODULES``), and what they
share: :mod:`training.commands.flags` (flags from dataclass fields) and
:mod:`training.commands.common` (:class:`~training.commands.common.UserError` and the checks
made before any work)."""

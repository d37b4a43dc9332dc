"""The ``tau-bench-env`` command (``main``) and its ``eval`` subcommand (``eval``)."""

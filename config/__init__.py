"""The leaf every layer may import: the settings read from the environment (``config.settings``)
and the exit codes of the commands and the worker (``config.exitcodes``). Imports nothing of the project."""

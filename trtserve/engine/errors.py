"""User-facing errors.

A `UserError` is raised for bad input (flags, configs, checkpoints, requests). Its message is one
sentence that names what was wrong and how to fix it; the CLI prints it without a stack trace
and exits non-zero. Anything else escaping is a bug in trtserve.
"""


class UserError(Exception):
    """Bad input from the user; the message says what was wrong and how to fix it."""


class EngineIntegrityError(UserError):
    """An engine directory does not match its manifest (modified, missing or truncated file)."""

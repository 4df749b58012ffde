"""User-facing errors.

A `UserError` is raised for bad input (flags, configs, checkpoints, requests). Its message is one
sentence that names what was wrong and how to fix it; the CLI prints it without a stack trace
and exits non-zero. Anything else escaping is a bug in trtserve.
"""


class UserError(Exception):
    """Bad input from the user; the message says what was wrong and how to fix it."""


class EngineIntegrityError(UserError):
    """An engine directory does not match its manifest (modified, missing or truncated file)."""


class UnsupportedError(UserError):
    """The backend serving this cannot do what was asked (HTTP 501); the message says what can."""


class EngineDeadError(RuntimeError):
    """The engine's loop stopped (a bug, or an injected fault in tests): its requests fail with HTTP
    503, readiness is false, and the server exits so that its supervisor restarts it."""


class EngineAsleepError(RuntimeError):
    """The engine was put to sleep (Engine.sleep) and is not serving until woken (HTTP 503)."""

"""Errors raised by outboard: one class per status code, each carrying ``.code``."""

from __future__ import annotations


class Error(Exception):
    """Base of every outboard error. ``code`` is the C++ ``outboard::Code`` value."""

    code: int = 1
    code_name: str = "unknown"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}" if self.message else self.code_name


def _make(name: str, code: int, code_name: str, *bases: type) -> type[Error]:
    return type(name, (Error, *bases), {"code": code, "code_name": code_name, "__module__": __name__})


InvalidArgument = _make("InvalidArgument", -1, "invalid argument", ValueError)
TooBig = _make("TooBig", -2, "too big", ValueError)
NotFound = _make("NotFound", -3, "not found", LookupError)
BadConfig = _make("BadConfig", -4, "bad config", ValueError)
Unsupported = _make("Unsupported", -5, "unsupported")
Again = _make("Again", -6, "again")
TimedOut = _make("TimedOut", -7, "timed out", TimeoutError)
NoMemory = _make("NoMemory", -8, "no memory", MemoryError)
IoError = _make("IoError", -9, "i/o error")
OutOfRange = _make("OutOfRange", -10, "out of range", IndexError)
BadState = _make("BadState", -11, "bad state", RuntimeError)
Failed = _make("Failed", -12, "failed", RuntimeError)
NotConnected = _make("NotConnected", -40, "not connected", ConnectionError)
ConnectionReset = _make("ConnectionReset", -41, "connection reset", ConnectionError)
Authentication = _make("Authentication", -42, "authentication", ConnectionError)
ShutDown = _make("ShutDown", -60, "shut down", ConnectionError)

_BY_CODE = {cls.code: cls for cls in Error.__subclasses__()}


def from_code(code: int, message: str) -> Error:
    """The exception for a status code (used by the extension)."""
    cls = _BY_CODE.get(code, Error)
    return cls(message)


__all__ = ["Error", "from_code"] + [cls.__name__ for cls in _BY_CODE.values()]

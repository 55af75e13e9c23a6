"""Errors the user can fix. The CLI prints them as one line on stderr, never a traceback."""


class DlscaleError(Exception):
    """An error caused by input or environment that the message tells the user how to fix."""


class ConfigError(DlscaleError):
    """A bad flag, preset or configuration value."""


class DeviceError(DlscaleError):
    """The device cannot run what was asked (precision, memory, missing GPU)."""


class DataError(DlscaleError):
    """A data set that is missing, empty, malformed or unsafe."""


class StorageError(DlscaleError):
    """A run directory that cannot be created or written (no permission, a full disk)."""

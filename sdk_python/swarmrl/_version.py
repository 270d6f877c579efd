"""The installed distribution's version."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("swarmrl")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

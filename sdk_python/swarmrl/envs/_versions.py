"""The versions of the libraries an adapter was built for, checked when it loads.

The verifiers and OpenEnv adapters lean on their libraries' behaviour (and, where no
public API exists, on a few internals, each looked up loudly). A release of the same
minor version is assumed compatible but said loudly; another minor or major version is
refused at load, before any rollout, rather than failing (or worse, quietly changing
what is trained) mid-run.
"""

from __future__ import annotations

import warnings
from importlib.metadata import PackageNotFoundError, version

__all__ = ["AdapterVersionError", "check_version"]


class AdapterVersionError(RuntimeError):
    """The installed library is a version the adapter was not built for."""


def _minor(text: str) -> tuple[str, ...]:
    return tuple(text.split("+")[0].split(".")[:2])


def check_version(distribution: str, built_for: str, adapter: str) -> str:
    """The installed version of `distribution`; raises `AdapterVersionError` when its
    major.minor differs from `built_for`, and warns when only the patch differs."""
    try:
        installed = version(distribution)
    except PackageNotFoundError as exc:
        raise AdapterVersionError(f"{adapter} needs {distribution}=={built_for}, which is not "
                                  "installed") from exc
    if _minor(installed) != _minor(built_for):
        raise AdapterVersionError(
            f"{adapter} was built for {distribution} {built_for}; {installed} is installed. "
            f"Install {distribution}=={built_for} (its internals and defaults differ between "
            "minor versions)")
    if installed != built_for:
        warnings.warn(f"{adapter} was built and tested with {distribution} {built_for}; "
                      f"{installed} is installed", RuntimeWarning, stacklevel=3)
    return installed

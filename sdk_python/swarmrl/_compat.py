"""Names that moved between the Python versions the SDK supports (3.10 to 3.12)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if sys.version_info >= (3, 11):
    from typing import Self, Unpack
elif TYPE_CHECKING:  # on 3.10 annotations that use these stay unevaluated strings
    from typing_extensions import Self, Unpack

__all__ = ["Self", "Unpack"]

"""``speedtronic.runtime``: the documented import path of ``speedtronic.training.runtime``."""

from speedtronic.training.runtime import *  # noqa: F403  # re-exported whole: this path is documented
from speedtronic.training.runtime import __all__ as __all__

"""``speedtronic.runtime``: the documented import path of ``speedtronic.training.from_config``."""

from speedtronic.training.from_config import *  # noqa: F403  # re-exported whole: this path is documented
from speedtronic.training.from_config import __all__ as __all__

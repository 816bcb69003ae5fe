from speedtronic.processors._old import *  # noqa: F403
from speedtronic.processors._old import __all__ as __all__

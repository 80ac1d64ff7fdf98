"""A stand-in for the parts of torch that torchtop_agent touches. No CUDA anywhere."""

__version__ = "2.11.0+fake"

from . import _C  # noqa: E402,F401
from . import cuda  # noqa: E402,F401

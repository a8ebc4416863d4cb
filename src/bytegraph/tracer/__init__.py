"""The symbolic interpreter: frames, opcode handlers and one trace's shared state."""

from .frame import DISPATCH, Frame
from .trace import Trace

__all__ = ["DISPATCH", "Frame", "Trace"]

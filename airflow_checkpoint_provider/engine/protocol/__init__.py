"""The engine's wire protocol: frames on data and control connections (:mod:`.frames`),
the checkpoint barrier (:mod:`.barrier`) and the typed control messages (:mod:`.messages`)."""

from .barrier import BarrierKind, CheckpointBarrier
from .errors import AuthenticationError, FrameTooLargeError, ProtocolError
from .messages import PROTOCOL_VERSION, Message, decode, encode

__all__ = ["PROTOCOL_VERSION", "AuthenticationError", "BarrierKind", "CheckpointBarrier",
           "FrameTooLargeError", "Message", "ProtocolError", "decode", "encode"]

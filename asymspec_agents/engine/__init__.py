"""The AsymSpec decoding engine."""

from ..models.remote import RemoteModel, RemoteModelError
from .config import MODES, GenerationConfig
from .decisions import DecisionPolicy
from .engine import AsymSpecEngine, GenerationResult, StreamChunk
from .stats import GenerationStats, StreamStats

__all__ = ["AsymSpecEngine", "DecisionPolicy", "GenerationConfig", "GenerationResult", "GenerationStats", "MODES",
           "RemoteModel", "RemoteModelError", "StreamChunk", "StreamStats"]

"""asymspec-agents: a drafter reads everything, a verifier reads a compressed memory, AsymSpec joins them."""

from .engine import AsymSpecEngine, DecisionPolicy, GenerationConfig, GenerationResult, GenerationStats, StreamChunk
from .errors import (AsymSpecError, ConfigError, ContextTooLongError, InvalidInputError, ModelLoadError,
                     VocabularyMismatchError)
from .threads import configure_threads

__all__ = ["AsymSpecEngine", "AsymSpecError", "ConfigError", "ContextTooLongError", "DecisionPolicy",
           "GenerationConfig", "GenerationResult", "GenerationStats", "InvalidInputError", "ModelLoadError",
           "StreamChunk", "VocabularyMismatchError", "configure_threads"]
__version__ = "0.1.0"

"""LangChain integration of asymspec-agents: `ChatAsymSpec`."""

from .chat_models import ChatAsymSpec

__all__ = ["ChatAsymSpec"]
__version__ = "0.1.0"

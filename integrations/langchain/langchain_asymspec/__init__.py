"""LangChain integration of asymspec-agents: `ChatAsymSpec`, and `AsymSpecMiddleware` for `create_agent`."""

from .chat_models import ChatAsymSpec

__all__ = ["AsymSpecMiddleware", "ChatAsymSpec"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "AsymSpecMiddleware":  # needs `langchain` (create_agent's middleware), not only langchain-core
        from .middleware import AsymSpecMiddleware

        return AsymSpecMiddleware
    raise AttributeError(f"module 'langchain_asymspec' has no attribute {name!r}")

"""The project's own exception types. Every message says what was wrong and how to fix it."""


class AsymSpecError(Exception):
    """Base class of every error raised by asymspec-agents."""


class ConfigError(AsymSpecError, ValueError):
    """A generation setting is out of range or inconsistent."""


class InvalidInputError(AsymSpecError, ValueError):
    """Token ids, messages or tool schemas handed to the library are malformed."""


class ContextTooLongError(InvalidInputError):
    """A prompt does not fit the model's context window."""


class VocabularyMismatchError(AsymSpecError, ValueError):
    """Drafter and verifier do not share a token <-> id mapping."""


class ModelLoadError(AsymSpecError, RuntimeError):
    """A model or tokenizer could not be found or loaded."""


class InvalidMessageError(InvalidInputError):
    """A conversation handed to `DualContext.render` is malformed (unknown role, dangling tool result, ...)."""


class InvalidToolSchemaError(InvalidInputError):
    """A tool's name or JSON schema is malformed."""


class CacheBudgetError(AsymSpecError, RuntimeError):
    """A call found no room in the cache pool's KV budget while other calls held it (retry, or raise the budget)."""

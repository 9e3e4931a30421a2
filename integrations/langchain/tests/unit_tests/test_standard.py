"""LangChain's standard unit tests for chat models (langchain-tests), as partner packages wire them."""

from langchain_tests.unit_tests import ChatModelUnitTests

from langchain_asymspec import ChatAsymSpec


class TestChatAsymSpecStandard(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatAsymSpec]:
        return ChatAsymSpec

    @property
    def chat_model_params(self) -> dict:
        return {"verifier": "bundled", "drafter": "bundled"}

"""LangChain's standard integration tests for chat models (langchain-tests) on the default pair (bundled-agent
verifying for bundled-agent-small).

Media the text-only pair cannot read (images, PDFs, audio, video) is declared unsupported through the suite's
capability properties; everything else runs as the suite defines it.
"""

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests

from langchain_asymspec import ChatAsymSpec

pytestmark = pytest.mark.integration


class TestChatAsymSpecStandard(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatAsymSpec]:
        return ChatAsymSpec

    @property
    def chat_model_params(self) -> dict:
        # the default pair: its verifier, tuned to act as an agent, decides by itself to call a tool, which
        # test_agent_loop needs (the raw SmolLM2-135M-Instruct never calls one under "auto"; docs/agents.md)
        return {"max_tokens": 64}

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supports_image_inputs(self) -> bool:
        return False

    @property
    def supports_image_urls(self) -> bool:
        return False

    @property
    def supports_pdf_inputs(self) -> bool:
        return False

    @property
    def supports_audio_inputs(self) -> bool:
        return False

    @property
    def supports_video_inputs(self) -> bool:
        return False

    @property
    def supports_image_tool_message(self) -> bool:
        return False

    @property
    def supports_pdf_tool_message(self) -> bool:
        return False

    @property
    def supports_model_override(self) -> bool:
        return False  # one process-wide engine per model pair; another pair is another ChatAsymSpec


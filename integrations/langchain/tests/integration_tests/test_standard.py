"""LangChain's standard integration tests for chat models (langchain-tests) on the bundled SmolLM2-135M pair.

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
        return {"verifier": "bundled", "drafter": "bundled", "max_tokens": 64}

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

    # The one standard test the bundled 135M pair fails. The test binds get_weather with tool_choice=None ("auto")
    # and needs the model to *choose* to call it. SmolLM2-135M-Instruct was not trained on tool calling: at the first
    # position of its reply the tool-call opening "<" has probability 0.012 (rank 10; "The" 0.14), so greedy decoding
    # answers in prose. The grammar cannot help without overriding "auto" (it only constrains a call once begun).
    # Forced tool choices ("any", "required", a name) and agent loops that set them pass: test_tool_calling,
    # test_tool_choice, tests/integration_tests/test_langgraph.py. strict: a model that calls tools makes this XPASS.
    @pytest.mark.xfail(strict=True, reason="SmolLM2-135M does not choose to call tools under tool_choice='auto'")
    @pytest.mark.parametrize("model", [{}, {"output_version": "v1"}], indirect=True)
    def test_agent_loop(self, model) -> None:
        super().test_agent_loop(model)

"""Dual-view agent memory: the full conversation for the drafter, a compressed one for the verifier.

    ctx = DualContext(tokenizer, policy=CompressionPolicy(...), drafter=None)
    views = ctx.render(messages, tools=[ToolSpec(...)], query=None)
    views.full_ids, views.comp_ids, views.full_text, views.comp_text, views.report
"""

from .compressors import BM25Select, Compressor, EmbeddingSelect, HeadTail, SurprisalPrune
from .messages import AssistantMessage, ImageItem, Passage, SystemMessage, ToolCall, ToolResult, UserMessage
from .policy import CompressionPolicy
from .render import DualContext, DualViews
from .report import CompressionReport, ReportItem
from .tool_format import InvalidToolCall, ParsedOutput, ParsedToolCall, parse_tool_calls
from .tools import ToolSpec, signature, tool_spec_from_callable

__all__ = [
    "DualContext", "DualViews", "CompressionPolicy", "CompressionReport", "ReportItem",
    "SystemMessage", "UserMessage", "AssistantMessage", "ToolCall", "ToolResult", "Passage", "ImageItem", "ToolSpec",
    "Compressor", "HeadTail", "BM25Select", "EmbeddingSelect", "SurprisalPrune",
    "parse_tool_calls", "ParsedOutput", "ParsedToolCall", "InvalidToolCall", "signature", "tool_spec_from_callable",
]

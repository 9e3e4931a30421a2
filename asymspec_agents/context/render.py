"""DualContext: one conversation in, two token sequences out (full view for the drafter, compressed view for the verifier).

Layout of both views (chat template of the tokenizer, tool format of `tool_format`):
  system turn   system prompt, then the tools block (full JSON schemas | signatures); a system turn holding only
                the tools block is added first when the conversation has tools but no leading system message
  user turn     images, then retrieved passages in <documents>, then the text
  assistant     text, then one <tool_call> block per call (calls are never compressed: they must stay exact)
  tool turn     <tool_response name="..."> images, then the result </tool_response>
  and, at the end, the generation prompt that opens the assistant's reply.

Append-stability: each turn is tokenized on its own and each item's compressed form depends only on the item and
what came before it, so appending messages appends tokens to both views (see `policy` for the two opt-in
exceptions). Query-aware compressors (BM25, embeddings) follow one rule:

  An item is compressed with the query current at the step it first arrived. That query is the `query=` passed
  to `render` at that step if any, else one built from the conversation up to the item: for a tool result the
  latest user message plus the call it answers (name and arguments); for a passage its own user message. The
  explicit query an item first arrived with is remembered by content hash, so later steps that pass another
  query (or none) compress it the same way.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import ContextTooLongError, InvalidInputError
from .cache import LRUCache, content_key
from .chat_format import chat_format
from .compressors import BM25Select, drafter_surprisal
from .messages import AssistantMessage, ImageItem, SystemMessage, ToolResult, UserMessage, validate_conversation
from .policy import RETRIEVED_KINDS, CompressionPolicy
from .report import CompressionReport, ReportItem
from .tokens import Cl100kCounter, TokenCounter
from .tool_format import TOOL_RESULT_CLOSE, format_tool_call, tool_result_open, tools_block
from .tools import ToolSpec, signature, validate_tools


class ImageWarning(UserWarning):
    """Images are read as their stand-in text (a text-only pair), said once per DualContext."""


@dataclass
class DualViews:
    full_ids: list[int]
    comp_ids: list[int]
    full_text: str
    comp_text: str
    report: CompressionReport
    images: list[ImageItem] = field(default_factory=list)  # images the full view refers to, in order
    append_stable: bool = True  # False only for chat templates that re-render earlier turns (see chat_format)
    truncated: dict[str, int] = field(default_factory=dict)  # view -> tokens of old turns dropped to fit the window


class DualContext:
    """Renders conversations into the two views; keeps the compression cache across calls.

    `drafter`: a causal LM sharing the verifier's tokenizer, needed only by the "surprisal" compressor.
    `captioner(image) -> str`: captions images that come without one. `embedder`: for the "embedding" compressor.
    Thread-safe: one instance may serve concurrent requests.
    """

    def __init__(self, tokenizer, policy: CompressionPolicy | None = None, drafter=None, *,
                 captioner: Callable[[ImageItem], str] | None = None, embedder=None, cache_size: int = 4096):
        self.policy = policy or CompressionPolicy()
        self.tokens = TokenCounter(tokenizer)
        self.cl100k = Cl100kCounter()
        self.format = chat_format(tokenizer)
        scorer = drafter_surprisal(drafter) if drafter is not None else None
        self.compressors = self.policy.build_compressors(surprisal_scorer=scorer, embedder=embedder)
        self.retriever = BM25Select()  # the drafter's retrieval view (policy.drafter_budget)
        self.captioner = captioner
        self.cache = LRUCache(cache_size)  # compressions, tools blocks and captions, by content hash
        self._said_images = False  # the warning that images are read as text, once per memory
        self._arrivals = LRUCache(cache_size)  # item -> the explicit query current when it first arrived

    def render(self, messages, tools=None, query: str | None = None, *, add_generation_prompt: bool = True,
               window: int | None = None) -> DualViews:
        """Both views of `messages` (message objects or role dicts) with `tools` (ToolSpecs or dicts).

        `query`: what query-aware compressors select for, for items arriving at this step (see module doc).
        `window`: the most tokens a view may hold; a longer one keeps its first and latest turns (`fit_window`).
        Raises `InvalidMessageError` / `InvalidToolSchemaError` on malformed input.
        """
        specs = validate_tools(tools)
        turns, full_segments, prompt, full_ids = self._whole(messages, specs, query, add_generation_prompt)

        fits = self.policy.total_budget is not None and len(full_ids) <= self.policy.total_budget
        if self.policy.drafter_budget is not None and not fits:  # both read everything while it fits
            full_segments = self.format.segments(_texts(turns, self._drafter_text))
            full_ids = self._ids(full_segments, prompt)
        report = CompressionReport(fits_total_budget=fits, cl100k_note=self.cl100k.note)
        comp_turns = []
        for role, parts in turns:
            comp_turns.append((role, "".join(self._comp(part, report, fits) for part in parts)))
        comp_segments = full_segments if fits else self.format.segments(comp_turns)
        comp_ids = full_ids if fits else self._ids(comp_segments, prompt)
        truncated, head = {}, _head(turns)
        full_segments, full_ids = self._fitted(full_segments, prompt, full_ids, window, "full", head, truncated)
        comp_segments, comp_ids = self._fitted(comp_segments, prompt, comp_ids, window, "comp", head, truncated)

        report.full_tokens, report.comp_tokens = len(full_ids), len(comp_ids)
        report.full_cl100k = self._cl100k(full_segments, prompt)
        report.comp_cl100k = self._cl100k(comp_segments, prompt)
        images = [part.image for _, parts in turns for part in parts if isinstance(part, _Item) and part.image]
        return DualViews(full_ids, comp_ids, "".join(full_segments) + prompt, "".join(comp_segments) + prompt,
                         report, images, self.format.append_stable, truncated)

    def _fitted(self, segments: list[str], prompt: str, ids: list[int], window: int | None, view: str, head: int,
                truncated: dict[str, int]) -> tuple[list[str], list[int]]:
        """A view's segments and ids cut to `window` when they exceed it; the tokens dropped go to `truncated`."""
        if window is None or len(ids) <= window:
            return segments, ids
        segments, truncated[view] = self.fit_window(segments, prompt, window,
                                                    "full" if view == "full" else "compressed", head)
        return segments, self._ids(segments, prompt)

    def fit_window(self, segments: list[str], prompt: str, window: int, view: str,
                   head: int = 1) -> tuple[list[str], int]:
        """The turns of a view that fit `window` tokens with the generation prompt, and the tokens dropped: the
        first `head` turns (system prompt and tools, the first request) and the latest turns stay; whole turns
        go, oldest first, in steps of a quarter window, so that the cut stays put while the conversation grows
        by less than a step (the turns after it keep their cached keys and values) and moves rarely."""
        if self.policy.on_overflow == "error":
            raise ContextTooLongError(f"The {view} view has more than {window} tokens, the most the models' window "
                                      "leaves it; compress harder, drop old turns, or use on_overflow='truncate'.")
        sizes = [self.tokens.count(segment) for segment in segments]
        total = sum(sizes) + self.tokens.count(prompt)
        step = max(1, window // 4)
        target = -(-(total - window) // step) * step  # the excess, rounded up to whole steps
        head = min(head, len(segments) - 1)
        cut, dropped = head, 0
        while dropped < target and cut < len(segments) - 1:  # the latest turn always stays
            dropped += sizes[cut]
            cut += 1
        if total - dropped > window:
            raise ContextTooLongError(
                f"The {view} view's first request and latest turn alone have {total - dropped} tokens, more than "
                f"the {window} the models' window leaves them; shorten the system prompt, the tools, the first "
                "request or the last message.")
        return [*segments[:head], *segments[cut:]], dropped

    def render_text(self, text: str, *, window: int | None = None) -> DualViews:
        """Both views of a plain prompt, no chat template around it (`/v1/completions`): the drafter reads it
        whole, the verifier compressed as a user message's text is (`budgets["user"]`; whole by default).
        Raises ContextTooLongError past `window` tokens (a plain prompt has no turns to drop)."""
        if not isinstance(text, str) or not text:
            raise InvalidInputError(f"A prompt is a non-empty string, got {type(text).__name__} {str(text)[:40]!r}.")
        report = CompressionReport(cl100k_note=self.cl100k.note)
        comp_text = self._comp(_Item("user", text, 0), report, fits=False)
        full_ids = self.tokens.encode(text)
        comp_ids = full_ids if comp_text == text else self.tokens.encode(comp_text)
        for view, ids in (("full", full_ids), ("compressed", comp_ids)):
            if window is not None and len(ids) > window:
                raise ContextTooLongError(f"The prompt's {view} view has {len(ids)} tokens, more than the {window} "
                                          "the models' window leaves it after max_tokens; send a shorter prompt or "
                                          "ask for fewer tokens.")
        report.full_tokens, report.comp_tokens = len(full_ids), len(comp_ids)
        report.full_cl100k, report.comp_cl100k = self._cl100k([text], ""), self._cl100k([comp_text], "")
        return DualViews(full_ids, comp_ids, text, comp_text, report)

    def render_pair(self, full_messages, comp_messages, tools=None, query: str | None = None, *,
                    window: int | None = None) -> DualViews:
        """Two conversations as the two views: the drafter reads `full_messages` (the conversation before the
        caller's own compression, e.g. a framework's context middleware), the verifier `comp_messages` (after
        it). Both are rendered whole: the caller's compression replaces this memory's policy. `window` as in
        `render`."""
        specs = validate_tools(tools)
        turns, full_segments, prompt, full_ids = self._whole(full_messages, specs, query, True, self._drafter_text)
        _, comp_segments, comp_prompt, comp_ids = self._whole(comp_messages, specs, query, True)
        truncated = {}
        full_segments, full_ids = self._fitted(full_segments, prompt, full_ids, window, "full", _head(turns), truncated)
        # the caller's own conversation: its first turn stays
        comp_segments, comp_ids = self._fitted(comp_segments, comp_prompt, comp_ids, window, "comp", 1, truncated)
        report = CompressionReport(full_tokens=len(full_ids), comp_tokens=len(comp_ids), cl100k_note=self.cl100k.note,
                                   full_cl100k=self._cl100k(full_segments, prompt),
                                   comp_cl100k=self._cl100k(comp_segments, comp_prompt))
        images = [part.image for _, parts in turns for part in parts if isinstance(part, _Item) and part.image]
        return DualViews(full_ids, comp_ids, "".join(full_segments) + prompt, "".join(comp_segments) + comp_prompt,
                         report, images, self.format.append_stable, truncated)

    def _whole(self, messages, specs: list[ToolSpec], query: str | None, add_generation_prompt: bool,
               text: Callable = None):
        """(turns, segments, generation prompt, token ids) of a conversation with every item whole, or as
        `text(part)` gives it."""
        turns = self._plan(validate_conversation(messages), specs, query)
        texts = _texts(turns, text or _full)
        segments = self.format.segments(texts)
        prompt = self.format.generation_prompt(texts) if add_generation_prompt else ""
        return turns, segments, prompt, self._ids(segments, prompt)

    # -----------------------------------------------------------------------------------------------------------
    # Walk: messages -> turns of literal text and compressible items

    def _plan(self, messages, specs: list[ToolSpec], query: str | None) -> list[tuple[str, list]]:
        window = self.policy.keep_last_turns
        total_turns = sum(isinstance(m, UserMessage) for m in messages)
        tools_item = _Item("tools", self._tools_full(specs), None, specs=specs) if specs else None
        turns: list[tuple[str, list]] = []
        if tools_item and not isinstance(messages[0], SystemMessage):
            turns.append(("system", [tools_item]))
        calls, last_user, turn_no = {}, "", 0
        for index, message in enumerate(messages):
            turn_no += isinstance(message, UserMessage)
            old = window is not None and turn_no <= total_turns - window
            verbatim = window is not None and not old  # inside the window of recent turns

            def item(kind, text, derived_query=None):
                arrived = self._arrived_query(kind, text, query, derived_query)
                uses_query = kind in self.compressors and self.compressors[kind].uses_query
                return _Item(kind, text, index, arrived if uses_query else None, old, verbatim, drafter_query=arrived)

            if isinstance(message, SystemMessage):
                parts = [message.content]
                if index == 0 and tools_item:
                    parts = ([message.content, "\n\n"] if message.content else []) + [tools_item]
                turns.append(("system", parts))
            elif isinstance(message, UserMessage):
                passage_query = message.content.strip() or last_user
                parts = [self._image_item(image, index) for image in message.images]
                if message.passages:
                    parts.append("<documents>\n")
                    for number, passage in enumerate(message.passages, 1):
                        parts += [_document_open(passage, number), item("passage", passage.text, passage_query), "\n</document>\n"]
                    parts.append("</documents>\n\n")
                parts.append(item("user", message.content, last_user))
                last_user = message.content
                turns.append(("user", parts))
            elif isinstance(message, AssistantMessage):
                parts = [item("assistant", message.content, last_user)] if message.content else []
                for call in message.tool_calls:
                    calls[call.id] = call
                    parts += ["\n" if parts else "", format_tool_call(call.name, call.arguments)]
                turns.append(("assistant", parts))
            elif isinstance(message, ToolResult):
                call = calls[message.tool_call_id]
                pending = f"{last_user}\n{call.name} {json.dumps(call.arguments, ensure_ascii=False)}"
                parts = [tool_result_open(message.name or call.name, message.is_error),
                         *(self._image_item(image, index) for image in message.images),
                         item("tool_result", message.content, pending), TOOL_RESULT_CLOSE]
                turns.append((self.format.tool_role, parts))
        return turns

    def _arrived_query(self, kind: str, text: str, explicit: str | None, derived: str | None) -> str | None:
        arrived_with = self._arrivals.setdefault(content_key("arrival", kind, text), explicit)
        return arrived_with if arrived_with is not None else derived

    def _image_item(self, image: ImageItem, index: int) -> _Item:
        """An image as its stand-in text in both views: the caller's caption, else the captioner's (once per image),
        else none."""
        if not self._said_images:
            self._said_images = True
            warnings.warn(ImageWarning(
                "Images reach both models as stand-in text: the ImageItem's caption (alt text), else what "
                "DualContext's captioner says of it, else '[image]'. No model of this pair reads pixels."), stacklevel=4)
        source = _image_source(image)
        caption = image.caption
        if caption is None and self.captioner is not None:
            caption, _ = self.cache.get_or_compute(content_key("caption", _image_digest(image)), lambda: self.captioner(image))
        full = f'<image src="{source}">{caption}</image>\n' if caption else f'<image src="{source}"/>\n'
        comp = f"[image: {caption}]\n" if caption else "[image]\n"
        return _Item("image", full, index, comp_text=comp, image=image)

    # -----------------------------------------------------------------------------------------------------------
    # Compression of one item, through the cache

    def _comp(self, part, report: CompressionReport, fits: bool) -> str:
        if isinstance(part, str):
            return part
        if fits:
            text, name, budget, cached = part.text, "none", None, False
        elif part.kind == "tools":
            budget = self.policy.budget("tools")
            text, cached = self.cache.get_or_compute(content_key("tools", part.text, budget), lambda: self._tools_comp(part.specs, budget))
            name = "signatures"
        elif part.kind == "image":
            text, name, budget, cached = part.comp_text, "caption", None, False
        else:
            text, name, budget, cached = self._compress_text(part)
        report.items.append(ReportItem(
            part.message_index, part.kind, name, budget, self.tokens.count(part.text), self.tokens.count(text),
            self.cl100k.count(part.text), self.cl100k.count(text), cached,
        ))
        return text

    def _drafter_text(self, part) -> str:
        """What the drafter reads of a part: all of it, or its retrieval view (`CompressionPolicy.drafter_budget`)."""
        budget = self.policy.drafter_budget
        if isinstance(part, str) or budget is None or part.kind not in RETRIEVED_KINDS:
            return _full(part)
        key = content_key("drafter", part.kind, budget, part.drafter_query, part.text)
        text, _ = self.cache.get_or_compute(key, lambda: self.retriever(part.text, budget, self.tokens, part.drafter_query))
        return text

    def _compress_text(self, part: _Item) -> tuple[str, str, int | None, bool]:
        budget = self.policy.budget(part.kind, old_turn=part.old)
        if part.verbatim or budget is None:
            return part.text, "none", budget, False
        compressor = self.compressors[part.kind]
        key = content_key(part.kind, compressor.name, compressor.settings(), budget, part.query, part.text)
        text, cached = self.cache.get_or_compute(key, lambda: compressor(part.text, budget, self.tokens, part.query))
        return text, compressor.name if text != part.text else "none", budget, cached

    # -----------------------------------------------------------------------------------------------------------
    # Tools block and tokens

    def _tools_full(self, specs: list[ToolSpec]) -> str:
        return tools_block([json.dumps(spec.to_dict(), ensure_ascii=False) for spec in specs])

    def _tools_comp(self, specs: list[ToolSpec], budget: int | None) -> str:
        block = tools_block([signature(spec) for spec in specs])
        if budget is not None and self.tokens.count(block) > budget:
            block = tools_block([signature(spec, description=False) for spec in specs])  # names and types must stay
        return block

    def _ids(self, segments: list[str], prompt: str) -> list[int]:
        ids: list[int] = []
        for segment in segments:
            ids += self.tokens.encode(segment)
        if prompt:
            ids += self.tokens.encode(prompt)
        return ids

    def _cl100k(self, segments: list[str], prompt: str) -> int | None:
        if not self.cl100k.available:
            return None
        return sum(self.cl100k.count(segment) for segment in segments) + (self.cl100k.count(prompt) if prompt else 0)


@dataclass
class _Item:
    kind: str
    text: str  # the full view's text
    message_index: int | None
    query: str | None = None
    old: bool = False  # in a turn older than the policy's keep_last_turns window
    verbatim: bool = False  # in the window: kept as is
    comp_text: str | None = None  # images: the caption text, fixed
    image: ImageItem | None = None
    specs: list[ToolSpec] | None = None  # the tools block: its specs
    drafter_query: str | None = None  # what the drafter's retrieval view selects for


def _head(turns: list[tuple[str, list]]) -> int:
    """Leading turns a cut keeps: through the first user turn (the system prompt, the tools and the request)."""
    roles = [role for role, _ in turns]
    return roles.index("user") + 1 if "user" in roles else 1


def _full(part) -> str:
    return part if isinstance(part, str) else part.text


def _texts(turns: list[tuple[str, list]], text: Callable) -> list[tuple[str, str]]:
    """(role, content) per turn, each part as `text(part)` gives it."""
    return [(role, "".join(text(part) for part in parts)) for role, parts in turns]


def _document_open(passage, number: int) -> str:
    source = f' source="{passage.source}"' if passage.source else ""
    return f'<document id="{passage.id if passage.id is not None else number}"{source}>\n'


def _image_source(image: ImageItem) -> str:
    if isinstance(image.data_or_path, (bytes, bytearray)):
        return f"bytes:{_image_digest(image)[:12]}"
    return Path(str(image.data_or_path)).name


def _image_digest(image: ImageItem) -> str:
    data = image.data_or_path
    return hashlib.blake2b(bytes(data) if isinstance(data, (bytes, bytearray)) else str(data).encode(), digest_size=16).hexdigest()

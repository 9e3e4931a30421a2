import json

import pytest

from asymspec_agents.context import (AssistantMessage, CompressionPolicy, DualContext, ImageItem, Passage, SystemMessage,
                                     ToolCall, ToolResult, ToolSpec, UserMessage, parse_tool_calls)
from asymspec_agents.context import tokens as tokens_module
from asymspec_agents.context.render import ImageWarning
from asymspec_agents.context.tool_format import TOOLS_HEADER
from asymspec_agents.errors import InvalidMessageError, InvalidToolSchemaError
from asymspec_agents.testing import png_bytes

GEN = "<|im_start|>assistant\n"
WEATHER = ToolSpec("get_weather", "Get the weather for a city. Calls an API.", {
    "type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]})
LONG = "\n".join(f"reading {i}: station {i} reports {i % 30} degrees and wind {i % 7} m/s" for i in range(100))


def agent_conversation():
    return [
        SystemMessage("You are a weather bot."),
        UserMessage("How warm is it at station 42?"),
        AssistantMessage("Checking.", tool_calls=[ToolCall("c1", "get_weather", {"city": "station 42"})]),
        ToolResult("c1", "get_weather", LONG),
    ]


def test_both_views_end_with_the_generation_prompt(tok):
    views = DualContext(tok).render(agent_conversation(), tools=[WEATHER])
    assert views.full_text.endswith(GEN) and views.comp_text.endswith(GEN)
    gen_ids = tok.encode(GEN, add_special_tokens=False)
    assert views.full_ids[-len(gen_ids):] == gen_ids and views.comp_ids[-len(gen_ids):] == gen_ids


def test_ids_are_the_tokens_of_the_texts(tok):
    views = DualContext(tok).render(agent_conversation(), tools=[WEATHER])
    assert views.full_ids == tok.encode(views.full_text, add_special_tokens=False)
    assert views.comp_ids == tok.encode(views.comp_text, add_special_tokens=False)


def test_without_generation_prompt_the_views_stop_after_the_last_turn(tok):
    ctx = DualContext(tok)
    with_prompt = ctx.render(agent_conversation())
    without = ctx.render(agent_conversation(), add_generation_prompt=False)
    assert with_prompt.full_text == without.full_text + GEN and with_prompt.comp_ids[: len(without.comp_ids)] == without.comp_ids


def test_tools_go_in_the_leading_system_turn_full_schema_vs_signature(tok):
    views = DualContext(tok).render(agent_conversation(), tools=[WEATHER])
    system_full = views.full_text.split("<|im_end|>")[0]
    system_comp = views.comp_text.split("<|im_end|>")[0]
    assert system_full.startswith("<|im_start|>system\nYou are a weather bot.\n\n" + TOOLS_HEADER)
    assert json.dumps(WEATHER.to_dict()) in system_full
    assert "get_weather(city: str)  # Get the weather for a city.\n</tools>" in system_comp
    assert "City name" not in system_comp


def test_tools_without_a_system_message_get_their_own_first_system_turn(tok):
    views = DualContext(tok).render([UserMessage("hi")], tools=[WEATHER])
    assert views.comp_text.startswith("<|im_start|>system\n" + TOOLS_HEADER)
    assert views.comp_text.count("<|im_start|>system") == 1


def test_tool_calls_render_in_the_format_the_parser_reads(tok):
    views = DualContext(tok).render(agent_conversation())
    assistant_turn = views.full_text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    parsed = parse_tool_calls(assistant_turn)
    assert parsed.text == "Checking."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("get_weather", {"city": "station 42"})]


def test_tool_results_are_their_own_turns_with_error_status(tok):
    messages = agent_conversation()[:3] + [ToolResult("c1", "get_weather", "timeout", is_error=True)]
    views = DualContext(tok).render(messages)
    assert '<|im_start|>tool\n<tool_response name="get_weather" status="error">\ntimeout\n</tool_response><|im_end|>' in views.comp_text


def test_long_tool_output_is_compressed_to_its_budget_and_reported(tok):
    views = DualContext(tok, CompressionPolicy(budgets={"tool_result": 200})).render(agent_conversation())
    [item] = [i for i in views.report.items if i.kind == "tool_result"]
    assert item.compressor == "bm25" and item.budget == 200
    assert item.tokens_before == len(tok.encode(LONG)) and item.tokens_after <= 200
    assert "reading 42: station 42" in views.comp_text  # the query-relevant line survives
    assert LONG in views.full_text
    assert views.report.comp_tokens == len(views.comp_ids) < views.report.full_tokens == len(views.full_ids)


@pytest.mark.parametrize("kind", ["user", "assistant", "tool_result", "passage"])
@pytest.mark.parametrize("compressor", ["head_tail", "bm25"])
def test_budgets_hold_for_every_text_kind(tok, kind, compressor):
    messages = [
        UserMessage(LONG, passages=[Passage(LONG, source="log")]),
        AssistantMessage(LONG, tool_calls=[ToolCall("c1", "get_weather", {"city": "x"})]),
        ToolResult("c1", "get_weather", LONG),
    ]
    policy = CompressionPolicy(budgets={kind: 64}, compressors={kind: compressor})
    views = DualContext(tok, policy).render(messages)
    [item] = [i for i in views.report.items if i.kind == kind]
    assert item.compressor == compressor and item.tokens_after <= 64 < item.tokens_before


def test_tools_budget_drops_descriptions_when_signatures_do_not_fit(tok):
    # The budget counts the whole tools block (instructions included): 425 bytes with the description, 394 without.
    views = DualContext(tok, CompressionPolicy(budgets={"tools": 400})).render([UserMessage("hi")], tools=[WEATHER])
    [item] = [i for i in views.report.items if i.kind == "tools"]
    assert "get_weather(city: str)\n</tools>" in views.comp_text and item.tokens_after <= 400


def test_tools_keep_bare_signatures_even_over_budget_and_the_report_shows_it(tok):
    views = DualContext(tok, CompressionPolicy(budgets={"tools": 100})).render([UserMessage("hi")], tools=[WEATHER])
    [item] = [i for i in views.report.items if i.kind == "tools"]
    assert "get_weather(city: str)\n</tools>" in views.comp_text and item.tokens_after > item.budget


def test_compressed_view_equals_full_view_when_the_conversation_fits_the_total_budget(tok):
    ctx = DualContext(tok, CompressionPolicy(total_budget=100_000))
    views = ctx.render(agent_conversation(), tools=[WEATHER])
    assert views.report.fits_total_budget
    assert views.comp_ids == views.full_ids and views.comp_text == views.full_text
    assert all(item.compressor == "none" for item in views.report.items)


def test_compressed_view_equals_full_view_when_every_item_fits_its_budget(tok):
    messages = [SystemMessage("Be brief."), UserMessage("What is 2+2?", passages=[Passage("2+2 is 4.")]), AssistantMessage("4")]
    views = DualContext(tok).render(messages)
    assert views.comp_ids == views.full_ids


def test_passing_the_total_budget_switches_compression_on(tok):
    ctx = DualContext(tok, CompressionPolicy(total_budget=500))
    views = ctx.render(agent_conversation())
    assert not views.report.fits_total_budget and len(views.comp_ids) < len(views.full_ids)


def test_passages_are_rendered_as_documents_before_the_question(tok):
    message = UserMessage("Where is Oslo?", passages=[Passage("Oslo is in Norway.", source="atlas", id="p7")])
    views = DualContext(tok).render([message])
    assert '<documents>\n<document id="p7" source="atlas">\nOslo is in Norway.\n</document>\n</documents>\n\nWhere is Oslo?' in views.full_text


def test_images_are_captioned_in_the_compressed_view(tok, tmp_path):
    calls = []

    def captioner(image):
        calls.append(image)
        return "a cat on a mat"

    (tmp_path / "dog.jpg").write_bytes(png_bytes(color="brown"))  # Pillow reads it by content, whatever its name
    messages = [UserMessage("What is this?", images=[ImageItem(png_bytes(), caption=None),
                                                     ImageItem(tmp_path / "dog.jpg", caption="a dog")])]
    ctx = DualContext(tok, captioner=captioner)
    with pytest.warns(ImageWarning, match="No model of this pair reads pixels"):
        views = ctx.render(messages)
    assert "[image: a cat on a mat]\n[image: a dog]\nWhat is this?" in views.comp_text
    assert '<image src="dog.jpg">a dog</image>' in views.full_text
    assert [i.caption for i in views.images] == [None, "a dog"]
    ctx.render(messages)
    assert len(calls) == 1  # captions are cached by image content


def test_image_without_caption_or_captioner_is_a_bare_marker(tok):
    views = DualContext(tok).render([UserMessage("?", images=[ImageItem(png_bytes())])])
    assert "<|im_start|>user\n[image]\n?" in views.comp_text


def test_a_tool_result_carries_its_images_before_its_text_and_the_warning_comes_once(tok):
    import warnings

    messages = [UserMessage("Take a screenshot."),
                AssistantMessage("", [ToolCall("c1", "screenshot", {})]),
                ToolResult("c1", "screenshot", "Saved.", images=[ImageItem(png_bytes(), caption="a login form")])]
    ctx = DualContext(tok)
    with pytest.warns(ImageWarning):
        views = ctx.render(messages)
    assert '<tool_response name="screenshot">\n<image src="bytes:' in views.full_text
    assert "a login form</image>\nSaved." in views.full_text and "[image: a login form]\nSaved." in views.comp_text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctx.render(messages)  # said once per memory


@pytest.mark.parametrize("image, says", [
    (ImageItem(b"not an image at all"), "not an image that can be read"),
    (ImageItem(png_bytes()[:40]), "not an image that can be read"),  # truncated
    (ImageItem("no/such/file.png"), "no image file"),
    (ImageItem(12345), "bytes or a file path"),
    ({"url": "x"}, "takes 'data_or_path' and 'caption'"),
])
def test_bad_images_get_an_invalid_message_error_naming_the_message_and_image(tok, image, says):
    with pytest.raises(InvalidMessageError, match=says) as raised:
        DualContext(tok).render([{"role": "user", "content": "?", "images": [image]}])
    assert "Message 0" in str(raised.value)


def test_images_past_the_size_limits_are_refused(tok, monkeypatch):
    from asymspec_agents.context import images

    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 100)
    with pytest.raises(InvalidMessageError, match="more than the 100 read here"):
        DualContext(tok).render([UserMessage("?", images=[ImageItem(png_bytes(64, 64))])])
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 20 << 20)
    monkeypatch.setattr(images, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(InvalidMessageError, match="4000x1 pixels") as raised:
        DualContext(tok).render([UserMessage("?", images=[ImageItem(png_bytes(4000, 1, "blue"))])])
    assert "can be read" not in str(raised.value)  # said as what it is, not as a broken file


def test_data_urls_are_decoded_and_remote_urls_refused():
    import base64

    from asymspec_agents.context.images import image_from_url

    data = png_bytes()
    image = image_from_url("data:image/png;base64," + base64.b64encode(data).decode(), "Message 1: image 1", "alt")
    assert image.data_or_path == data and image.caption == "alt"
    with pytest.raises(InvalidMessageError, match="nothing here fetches images"):
        image_from_url("https://example.com/cat.png", "Message 1: image 1")
    with pytest.raises(InvalidMessageError, match="not valid base64"):
        image_from_url("data:image/png;base64,@@@@", "Message 1: image 1")
    with pytest.raises(InvalidMessageError, match="not a base64 data URL"):
        image_from_url("file:///etc/passwd", "Message 1: image 1")


def test_two_system_messages_and_consecutive_user_messages_are_rendered_as_sent(tok):
    messages = [SystemMessage("A"), SystemMessage("B"), UserMessage("u1"), UserMessage("u2")]
    views = DualContext(tok).render(messages)
    assert views.full_text == (
        "<|im_start|>system\nA<|im_end|>\n<|im_start|>system\nB<|im_end|>\n"
        "<|im_start|>user\nu1<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n" + GEN
    )


def test_keep_last_turns_keeps_recent_turns_verbatim_and_shortens_older_ones(tok):
    turn = lambda n: [UserMessage(f"question {n}"), AssistantMessage(f"answer {n}: " + LONG)]
    messages = turn(1) + turn(2) + turn(3)
    views = DualContext(tok, CompressionPolicy(keep_last_turns=1, old_turn_budget=64)).render(messages)
    assistant = {i.message_index: i for i in views.report.items if i.kind == "assistant"}
    assert assistant[1].compressor == "head_tail" and assistant[1].tokens_after <= 64
    assert assistant[3].compressor == "head_tail"
    assert assistant[5].compressor == "none" and "answer 3: " + LONG in views.comp_text


def test_invalid_tool_schema_is_rejected_by_render(tok):
    with pytest.raises(InvalidToolSchemaError):
        DualContext(tok).render([UserMessage("hi")], tools=[ToolSpec("t", "", {"type": "object", "required": ["x"]})])


def test_cl100k_counts_are_none_with_a_reason_when_the_encoding_cannot_load(tok, monkeypatch):
    monkeypatch.setattr(tokens_module, "cl100k_encoding", lambda: (None, "cl100k_base is not available (test)"))
    views = DualContext(tok).render(agent_conversation())
    assert views.report.full_cl100k is None and views.report.cl100k_note == "cl100k_base is not available (test)"
    assert all(i.cl100k_before is None for i in views.report.items)


def test_cl100k_counts_are_reported_when_the_encoding_loads(tok, monkeypatch):
    class WordEncoding:  # stands in for tiktoken: one token per whitespace-separated word
        def encode(self, text, disallowed_special=()):
            return text.split()

    monkeypatch.setattr(tokens_module, "cl100k_encoding", lambda: (WordEncoding(), None))
    views = DualContext(tok).render(agent_conversation())
    [item] = [i for i in views.report.items if i.kind == "tool_result"]
    assert item.cl100k_before == len(LONG.split()) and item.cl100k_after < item.cl100k_before
    assert views.report.cl100k_note is None and views.report.comp_cl100k < views.report.full_cl100k


def test_report_totals_by_kind(tok):
    report = DualContext(tok).render(agent_conversation(), tools=[WEATHER]).report
    by_kind = report.by_kind()
    assert set(by_kind) == {"tools", "user", "assistant", "tool_result"}
    assert by_kind["tool_result"]["compressed"] == 1 and by_kind["user"]["compressed"] == 0
    assert 0 < report.ratio < 1 and report.to_dict()["by_kind"] == by_kind

import pytest

from asymspec_agents.context.chat_format import DiffFormat, RoleFormat, chat_format
from asymspec_agents.errors import InvalidMessageError
from asymspec_agents.testing import byte_tokenizer

# Llama-3 style: content is trimmed, so prefix + content + suffix does not hold.
TRIMMING = (
    "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n\n' + m['content'] | trim + '<|im_end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n\n' }}{% endif %}"
)
# Gemma style: the system prompt is folded into the first user turn and roles must alternate.
FOLDING = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
    "{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}"
    "{% for m in rest %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + (first if loop.first else '') + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Re-renders an earlier turn when one is appended (marks the last user turn).
RERENDERING = (
    "{% for m in messages %}{{ m['role'] + ('*' if loop.last else '') + ':' + m['content'] + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def tokenizer_with(template):
    tok = byte_tokenizer()
    tok.chat_template = template
    return tok


def reference(tok, turns, gen=False):
    return tok.apply_chat_template([{"role": r, "content": c} for r, c in turns], tokenize=False, add_generation_prompt=gen)


TURNS = [("system", "Be brief."), ("user", "  hello \n"), ("assistant", "hi"), ("tool", "result"), ("user", "bye")]


def test_chatml_templates_use_the_fast_per_role_format(tok):
    fmt = chat_format(tok)
    assert isinstance(fmt, RoleFormat) and fmt.tool_role == "tool"
    assert "".join(fmt.segments(TURNS)) + fmt.generation_prompt(TURNS) == reference(tok, TURNS, gen=True)
    assert fmt.segments(TURNS)[1] == "<|im_start|>user\n  hello \n<|im_end|>\n"


def test_trimming_templates_fall_back_to_exact_prefix_differences():
    tok = tokenizer_with(TRIMMING)
    fmt = chat_format(tok)
    assert isinstance(fmt, DiffFormat) and fmt.append_stable
    assert "".join(fmt.segments(TURNS)) + fmt.generation_prompt(TURNS) == reference(tok, TURNS, gen=True)
    assert fmt.segments(TURNS)[1] == "<|im_start|>user\n\nhello<|im_end|>"


def test_templates_that_fold_the_system_prompt_stay_exact():
    tok = tokenizer_with(FOLDING)
    fmt = chat_format(tok)
    turns = [("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "u2")]
    assert isinstance(fmt, DiffFormat) and fmt.tool_role == "user"
    assert "".join(fmt.segments(turns)) == reference(tok, turns)


def test_a_template_that_rejects_the_conversation_raises_a_message_error():
    fmt = chat_format(tokenizer_with(FOLDING))
    with pytest.raises(InvalidMessageError, match="rejected the conversation.*merge consecutive"):
        fmt.segments([("user", "a"), ("user", "b")])


def test_templates_that_rerender_earlier_turns_are_flagged_not_append_stable():
    tok = tokenizer_with(RERENDERING)
    fmt = chat_format(tok)
    segments = fmt.segments(TURNS)
    assert "".join(segments) == reference(tok, TURNS)
    assert not fmt.append_stable and len(segments) == 1


def test_base_models_without_a_template_get_the_plain_transcript_and_its_turn_stop():
    tok = tokenizer_with(None)
    fmt = chat_format(tok)
    turns = [("system", "Be brief."), ("user", "x"), ("assistant", "y"), ("user", "z")]
    assert "".join(fmt.segments(turns)) == f"{tok.bos_token}Be brief.\n\nUser: x\n\nAssistant: y\n\nUser: z\n\n"
    assert fmt.generation_prompt(turns) == "Assistant:"
    assert fmt.stop == ("\nUser:",)
    assert chat_format(tokenizer_with(FOLDING)).stop == ()

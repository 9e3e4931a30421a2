"""Render a conversation turn by turn with the tokenizer's own chat template.

Each turn becomes its own text segment, tokenized on its own by the caller, so BPE merges never cross a turn
boundary and a conversation that grows by appending turns grows by appending tokens.

Fast path: most templates (ChatML as in SmolLM2 and Qwen, Llama-3, ...) render every message as
`prefix(role) + content + suffix(role)`. We learn those strings once by rendering probe conversations through
`apply_chat_template`, then check them against the template on a test conversation (whitespace at content edges,
every role, with and without a leading system message). Templates that fail the check (content trimmed, roles
merged, ...) use the slow path: render each prefix of the conversation through the template and take differences.
"""

from __future__ import annotations

from ..errors import ConfigError, InvalidMessageError

# Base models (no chat template, e.g. Gemma-3-270M): a plain transcript, the format pretraining text uses most:
#
#     <bos>{system}\n\nUser: {text}\n\nAssistant: {text}\n\nTool: {text}\n\nAssistant:
#
# A base model has no end-of-turn token, so a reply ends where the model starts the next user turn (PLAIN_STOP).
PLAIN_TEMPLATE = (
    "{{ bos_token or '' }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ message['content'] + '\n\n' }}{% else %}{{ message['role'] | capitalize }}{{ ': ' + message['content'] + '\n\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
PLAIN_STOP = ["\nUser:"]
_PROBE = ("\u2063P0\u2063", "\u2063P1\u2063", "\u2063P2\u2063")  # content nothing real contains


def chat_format(tokenizer) -> ChatFormat:
    """The fast per-role format when the template allows it, else the prefix-diff format."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the default one renders chat
        template = template.get("default") or next(iter(template.values()))
    try:
        chat = RoleFormat(tokenizer, template or PLAIN_TEMPLATE)
    except _NotUniform:
        chat = DiffFormat(tokenizer, template or PLAIN_TEMPLATE)
    chat.stop = () if template else tuple(PLAIN_STOP)
    return chat


class ChatFormat:
    """`segments(turns)` -> one text per turn; `generation_prompt(turns)` -> the text that opens the reply."""

    tool_role: str = "tool"  # role of tool-result turns: "tool", or "user" where the template rejects "tool"
    stop: tuple[str, ...] = ()  # stop strings that end a reply (the plain format of base models has no end-of-turn token)
    append_stable: bool = True

    def segments(self, turns: list[tuple[str, str]]) -> list[str]:
        raise NotImplementedError

    def generation_prompt(self, turns: list[tuple[str, str]]) -> str:
        raise NotImplementedError


class _NotUniform(Exception):
    pass


class RoleFormat(ChatFormat):
    """prefix(role) + content + suffix(role), with a separate prefix for the first turn (BOS, default system prompt)."""

    def __init__(self, tokenizer, template: str):
        self._render = lambda messages, gen=False: _apply(tokenizer, template, messages, gen)
        self._prefix: dict[str, str] = {}
        try:
            system_text = self._render([_msg("system", _PROBE[0])])
            if system_text.count(_PROBE[0]) != 1:
                raise _NotUniform
            self._first_prefix = {"system": system_text.split(_PROBE[0])[0]}
            self._suffix = {"system": system_text.split(_PROBE[0])[1]}
            self._learn("user")
            self._learn("assistant")
            self._learn("system")
            try:
                self._learn("tool")
            except Exception:  # the template rejects or reshapes the "tool" role: tool results go in user turns
                self.tool_role = "user"
            both = [_msg("system", _PROBE[0]), _msg("user", _PROBE[1])]
            with_prompt = self._render(both, gen=True)
            without = self._render(both)
            if not with_prompt.startswith(without):
                raise _NotUniform
            self._gen_prompt = with_prompt[len(without):]
            self._check()
        except (_NotUniform, ValueError, TypeError, KeyError, IndexError):
            raise _NotUniform from None
        except Exception as exc:  # jinja raise_exception (e.g. "roles must alternate") arrives as TemplateError
            raise _NotUniform from exc

    def segments(self, turns):
        out = []
        for index, (role, content) in enumerate(turns):
            prefix = self._first_prefix[role] if index == 0 else self._prefix[role]
            out.append(prefix + content + self._suffix[role])
        return out

    def generation_prompt(self, turns):
        return self._gen_prompt

    def _learn(self, role: str) -> None:
        """prefix/suffix of `role` after a system turn, and its first-turn prefix."""
        text = self._render([_msg("system", _PROBE[0]), _msg(role, _PROBE[1])])
        if text.count(_PROBE[1]) != 1:
            raise _NotUniform
        between, suffix = text.split(_PROBE[0])[1].split(_PROBE[1])
        if not between.startswith(self._suffix["system"]):
            raise _NotUniform
        self._prefix[role] = between[len(self._suffix["system"]):]
        self._suffix[role] = suffix
        if role != "system":
            alone = self._render([_msg(role, _PROBE[1])])
            if alone.count(_PROBE[1]) != 1 or not alone.endswith(_PROBE[1] + suffix):
                raise _NotUniform
            self._first_prefix[role] = alone.split(_PROBE[1])[0]

    def _check(self) -> None:
        roles = ["system", "user", "assistant", self.tool_role, "user", "assistant", "system", "user", "user"]
        contents = [f" {i} edge\n\n text \n" if i % 2 else f"line {i}" for i in range(len(roles))]
        for turns in (list(zip(roles, contents)), list(zip(roles[1:], contents[1:]))):
            expected = self._render([_msg(r, c) for r, c in turns], gen=True)
            if "".join(self.segments(turns)) + self._gen_prompt != expected:
                raise _NotUniform


class DiffFormat(ChatFormat):
    """Slow but exact: segment i is render(turns[:i+1]) minus render(turns[:i]).

    If the template re-renders earlier turns when one is appended, the text is still exact but it comes back as a
    single segment and `append_stable` is False (the engine then re-prefills more).
    """

    def __init__(self, tokenizer, template: str):
        self._render = lambda messages, gen=False: _apply(tokenizer, template, messages, gen)
        try:
            self._render([_msg("system", _PROBE[0]), _msg("tool", _PROBE[1])])
        except Exception:
            self.tool_role = "user"
        self.append_stable = True

    def segments(self, turns):
        out, previous = [], ""
        for index in range(len(turns)):
            text = self._safe_render(turns[: index + 1])
            if not text.startswith(previous):
                self.append_stable = False
                return [self._safe_render(turns)]
            out.append(text[len(previous):])
            previous = text
        return out

    def generation_prompt(self, turns):
        return self._safe_render(turns, gen=True)[len(self._safe_render(turns)):]

    def _safe_render(self, turns, gen=False) -> str:
        try:
            return self._render([_msg(r, c) for r, c in turns], gen)
        except Exception as exc:
            raise InvalidMessageError(
                f"The model's chat template rejected the conversation ({exc}). It may need alternating user/assistant "
                "turns: merge consecutive messages of one role before rendering."
            ) from exc


def _msg(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def _apply(tokenizer, template: str, messages: list[dict], gen: bool) -> str:
    text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=gen)
    if not isinstance(text, str):
        raise ConfigError("apply_chat_template(tokenize=False) did not return text; this tokenizer is not supported.")
    return text

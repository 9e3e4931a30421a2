"""The teacher's side of distillation: its own greedy replies (on-policy data) and its log-probabilities on both views.

For each example the verifier answers on the full view, or on the excerpt an example names instead
(`Example.teacher_messages`, long documents: documents.py) (greedy, transformers' `generate`, whose step logits give
the full view's log-probabilities; an example with tools is decoded by the engine under the tool grammar a request
with its `tool_choice` gets, and one forward gives those rows); one forward over the compressed view + reply gives
that view's. At every reply
position a record keeps the log-probabilities of a candidate set: the `candidates` tokens most likely under either
view (the reply token among them). Records are small (no hidden states: the student's
frozen trunk is cheap to recompute), saved in shards so an interrupted run resumes where it stopped; each shard
names the examples and the teacher weights it was made from, so a cache made from other examples, or by a teacher
since retrained, is refused instead of misread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ...chat import AsymSpecChat
from ...context import DualContext
from ...engine import AsymSpecEngine
from ...errors import ConfigError
from .examples import Example

TOOL_REPLY_TOKENS = 48  # a whole call: <tool_call>{"name": …, "arguments": {…}}</tool_call>


@dataclass
class TeacherRecord:
    kind: str
    answer: str | None
    full: list[int]
    comp: list[int]
    reply: list[int]
    candidates: torch.Tensor  # [n, C] token ids per reply position
    lp_full: torch.Tensor  # [n, C] teacher log-probabilities on the full view (float16)
    lp_comp: torch.Tensor  # [n, C] the same on the compressed view


def teacher_records(verifier, tokenizer, examples: list[Example], out_dir: str | Path, *, shard_size: int = 50,
                    max_new_tokens: int = 32, max_prompt_tokens: int = 3000, candidates: int = 128,
                    progress: bool = True) -> list[TeacherRecord]:
    """Records for `examples`, computed shard by shard into `out_dir/teacher-NNNN.pt`; existing shards are loaded."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    engine = AsymSpecEngine(verifier, None, tokenizer)
    eos = sorted(engine.eos_token_ids)
    records: list[TeacherRecord] = []
    shards = range(0, len(examples), shard_size)
    teacher = _weights_digest(verifier)
    bar = tqdm(total=len(examples), desc="teacher", unit="example", disable=not progress)
    for start in shards:
        path = out_dir / f"teacher-{start // shard_size:04d}.pt"
        batch = examples[start:start + shard_size]
        if path.is_file():
            records += _load_shard(path, _fingerprint(batch, teacher))
            bar.update(len(batch))
            continue
        shard = []
        for example in batch:
            chat = AsymSpecChat(engine, policy=example.policy) if example.tools else None
            context = chat.context if chat else DualContext(tokenizer, example.policy)
            views = context.render(example.messages, tools=example.tools or None, query=example.query)
            read = example.teacher_messages or example.messages
            teacher_ids = views.full_ids if read is example.messages else context.render(
                read, tools=example.tools or None, query=example.query).full_ids
            if len(teacher_ids) <= max_prompt_tokens:
                if chat:
                    reply, full_rows = _tool_reply(chat, verifier, example, read, teacher_ids)
                else:
                    reply, full_rows = _greedy_reply(verifier, teacher_ids, max_new_tokens, eos)
                if len(reply) >= 2 and _answers(example, tokenizer, reply):
                    shard.append(_record(verifier, example, views.comp_ids, views.full_ids, reply, full_rows,
                                         candidates))
            bar.update()
        staging = path.with_suffix(".part")
        torch.save({"examples": _fingerprint(batch, teacher), "records": shard}, staging)
        staging.replace(path)
        records += shard
    bar.close()
    return records


def _fingerprint(examples: list[Example], teacher: str) -> str:
    """What a shard was made from: a hash of its examples (messages, tools, compression policy; all plain
    dataclasses, so their repr is stable across runs) and of the teacher's weights."""
    return hashlib.sha256("\n".join([teacher, *map(repr, examples)]).encode()).hexdigest()[:16]


def _weights_digest(model, samples: int = 4096) -> str:
    """A hash of every parameter's name, shape and an evenly strided sample of its values: a retrained teacher
    (a merged adapter moves every value of the layers it tunes) hashes differently, in well under a second."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, param in model.named_parameters():
            flat = param.detach().flatten()
            digest.update(f"{name}{tuple(param.shape)}".encode())
            digest.update(flat[:: max(1, flat.numel() // samples)].float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _load_shard(path: Path, expected: str) -> list[TeacherRecord]:
    saved = torch.load(path, weights_only=False)
    made_from = saved.get("examples") if isinstance(saved, dict) else None
    if made_from != expected:
        raise ConfigError(f"The teacher shard {path} was made from other examples (another --examples, --dev, "
                          "--tool-examples or --seed, or another Python's standard library) or by another teacher "
                          f"(another --verifier, or its weights retrained since); delete {path.parent} or pass "
                          "another --teacher-cache.")
    return saved["records"]


def _greedy_reply(model, prompt: list[int], max_new_tokens: int, eos: list[int]) -> tuple[list[int], torch.Tensor]:
    """The verifier's greedy reply on the full view and its log-probabilities at every reply position (the logits
    of the decoding steps themselves: no second forward over the full view)."""
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[0], output_logits=True, return_dict_in_generate=True)
    reply = out.sequences[0, len(prompt):].tolist()
    return reply, torch.log_softmax(torch.stack(out.logits)[:, 0].float(), dim=-1)


def _tool_reply(chat: AsymSpecChat, verifier, example: Example, messages: list, full: list[int]
                ) -> tuple[list[int], torch.Tensor]:
    """The verifier's greedy reply to `messages` (whose full view is `full`) under the request's tool grammar, and
    its (unconstrained) log-probabilities at every reply position."""
    reply = chat.reply(messages, tools=example.tools, tool_choice=example.tool_choice, query=example.query,
                       parallel_tool_calls=False, mode="full", max_new_tokens=TOOL_REPLY_TOKENS).token_ids
    with torch.inference_mode():
        return reply, reply_log_probs(verifier, full, reply)


def _answers(example: Example, tokenizer, reply: list[int]) -> bool:
    """False where the teacher read an excerpt holding the planted value and still missed it: such a reply
    would teach the student to miss it too. Other examples keep whatever the teacher said."""
    if example.teacher_messages is None or not example.answer:
        return True
    return example.answer.lower() in tokenizer.decode(reply, skip_special_tokens=True).lower()


def _record(verifier, example: Example, comp: list[int], full: list[int], reply: list[int], full_rows: torch.Tensor,
            size: int) -> TeacherRecord:
    with torch.inference_mode():
        rows = {"full": full_rows, "comp": reply_log_probs(verifier, comp, reply)}
    # the candidates: the tokens most likely under either view, the reply's own token first
    score = torch.maximum(rows["full"], rows["comp"])
    score.scatter_(-1, torch.tensor(reply)[:, None], float("inf"))
    candidates = score.topk(size, dim=-1).indices
    pick = lambda view: rows[view].gather(-1, candidates).half()  # noqa: E731
    return TeacherRecord(example.kind, example.answer, full, comp, reply, candidates.int(), pick("full"), pick("comp"))


def reply_log_probs(model, prompt: list[int], reply: list[int]) -> torch.Tensor:
    """log p(· | prompt + reply[:i]) for every reply position i, in one forward (the teacher's compressed view, the
    student's two views in training: gradients flow unless the caller turns them off). `[len(reply), vocab]`"""
    logits = model(input_ids=torch.tensor([prompt + reply[:-1]]), use_cache=False, logits_to_keep=len(reply)).logits
    return torch.log_softmax(logits[0].float(), dim=-1)

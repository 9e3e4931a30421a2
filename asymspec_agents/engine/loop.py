"""The decoding loop of one call: draft, contrast, verify, fuse, accept, commit, roll back (docs/design.md §3).

One `DecodingLoop` lives for one call. Its streams carry their caches from earlier calls; every block ends with
all streams rolled back to the committed length, so stopping between blocks always leaves them consistent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from . import fusion
from .acceptance import RULES, Verification, leading_accepts
from .bridge import DraftTranscript, VocabularyBridge
from .config import GenerationConfig
from .constraints import TokenConstraint
from .stats import ACCEPTED, BONUS, CORRECTION, VERIFIER, GenerationStats
from .streams import KVStream, forward_together

MAX_FILL_IN = 128  # tokens per row whose exact values a block may ask a server for (the highest bounds first)


@dataclass
class DraftBlock:
    """What the drafter proposed for one block."""

    tokens: list[int] = field(default_factory=list)  # in the verifier's ids
    drafter_tokens: list[int] = field(default_factory=list)  # the same in the drafter's ids (equal without a bridge)
    full_rows: list[torch.Tensor] = field(default_factory=list)  # a_i: drafter logits before each draft (+1 if read)
    proposals: list[torch.Tensor] = field(default_factory=list)  # q_i, sampling only (drafter vocabulary)
    masks: list[torch.Tensor | None] = field(default_factory=list)  # the grammar's allowed tokens at each draft
    decision_now: bool = False  # the block's first position is a decision point: the verifier takes it
    decision_next: bool = False  # the position after the drafts is one: no bonus token

    def __len__(self) -> int:
        return len(self.tokens)


class Commit(NamedTuple):
    """One committed token and where it came from."""

    token: int
    slot: int  # its verification slot in the block
    source: str  # ACCEPTED, CORRECTION, BONUS or VERIFIER
    decision: bool = False  # a tagged decision point


class DecodingLoop:
    def __init__(self, *, config: GenerationConfig, prompts: dict[str, list[int]], verify: KVStream,
                 draft: KVStream | None, contrast: KVStream | None, tokenizer, eos_ids: set[int],
                 max_new_tokens: int, stats: GenerationStats, constraint: TokenConstraint | None = None,
                 bridge: VocabularyBridge | None = None, drafter_prompts: dict[str, list[int]] | None = None):
        self.config = config = config.resolved()
        self.rule = RULES[config.acceptance]
        self.prompts = prompts  # view -> prompt ids
        # Across a vocabulary bridge the drafter reads the same text in its own tokens; otherwise the same ids.
        self.bridge = bridge
        self.drafter_prompts = drafter_prompts if bridge is not None else prompts
        self.transcript = DraftTranscript(bridge) if bridge is not None else None
        self.verify, self.draft, self.contrast = verify, draft, contrast
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens
        self.stats = stats
        stats.acceptance = self.rule.name
        self.constraint = constraint  # grammar state: masks drafts and targets alike, rolled back on rejection
        self.generated: list[int] = []
        self.finish_reason: str | None = None
        self.policy = config.decisions
        self.k = min(config.k_max, 4) if config.adaptive_k else config.k_max
        self._forced_decision = False  # the verifier's entropy tagged the next position
        lookback = self.policy.lookback_tokens if self.policy else 0
        self._tail = list(prompts[verify.view][-lookback:]) if lookback else []
        self._rng = torch.Generator(device=verify.device)
        self._rng.manual_seed(config.seed if config.seed is not None else int(torch.seed() % 2**63))

    def run(self) -> Iterator[list[int]]:
        """Yield the tokens committed by each block until EOS or the token budget."""
        synced: list[KVStream] = []
        for stream in self.streams:  # the verifier first: an identical drafter copies its prompt cache
            stream.sync(self._prompt(stream), donors=synced)
            synced.append(stream)
        while self.finish_reason is None:
            committed = self._speculative_block() if self.draft else self._verifier_step()
            yield self._commit(committed)

    # -- one block -------------------------------------------------------------------------------------------

    def _verifier_step(self) -> list[Commit]:
        """No drafter: the verifier decodes one token at slot 0."""
        allowed = self._allowed()
        left = self.max_new_tokens - len(self.generated) - 1  # single-token forwards likely to follow
        row = self._masked(self.verify.forward(self._unread(self.verify), keep=1, ahead=left)[0], allowed)
        decision = self._decision_before([], allowed) or self._entropy_decision(row)
        return [Commit(self._advance(self._choose(row)), 0, VERIFIER, decision)]

    def _speculative_block(self) -> list[Commit]:
        cfg = self.config
        rollback_cap = getattr(self.constraint, "max_rollback_tokens", None) or self.k
        block = self._draft_tokens(min(self.k, rollback_cap, self.max_new_tokens - len(self.generated) - 1))
        k = len(block)
        calls = [(self.verify, self._unread(self.verify) + block.tokens, k + 1)]
        if self.contrast:
            calls.append((self.contrast, self._unread(self.contrast) + block.drafter_tokens, k + 1))
        # t: [k+1, vocab]; b: [k+1, drafter vocab] (streams on servers send both requests at once)
        t_rows, b_rows = (forward_together(calls) + [None])[:2]

        n, cut, verification = k, None, None
        if k:
            verification, n, cut = self._verify(block, t_rows, b_rows)
        kept = cut if cut is not None else n
        committed = [Commit(x, slot, ACCEPTED) for slot, x in enumerate(block.tokens[:kept])]
        if self.constraint is not None and kept < k:
            self.constraint.rollback(k - kept)
        emitted = None
        if cut is not None:
            self._forced_decision = True
        elif n < k:
            token = self.rule.correction(verification, n, cfg.greedy, self._rng)
            emitted = (token, verification.target[n], self._fusing)
            committed.append(Commit(self._advance(token), n, CORRECTION))
        elif not block.decision_next and not (block.tokens and block.tokens[-1] in self.eos_ids):
            row, fused = self._bonus_row(block, t_rows, b_rows)
            row = self._masked(row, self._allowed())
            if k and self._entropy_decision(row):
                self._forced_decision = True
            else:
                token = self._choose(row)
                emitted = (token, self._masked(t_rows[k], self._allowed()), fused)
                committed.append(Commit(self._advance(token), k, BONUS if k else VERIFIER, block.decision_now))
        if k:
            self._record_block(k, kept, emitted)
            if cfg.adaptive_k:
                self.k = min(cfg.k_max, self.k + 2) if kept == k else max(1, self.k - 1)
        return committed

    def _bonus_row(self, block: DraftBlock, t_rows: torch.Tensor, b_rows: torch.Tensor | None):
        """The row the token after a fully accepted block comes from, and whether it is fused: t + β·δ with
        `fuse_bonus` (one more drafter step when δ needs a_{k+1}), else the verifier's own logits. A block
        without drafts (a decision point at slot 0) emits from t + β·δ, as a rejection does."""
        k = len(block)
        if b_rows is None or not (self.config.fuse_bonus or k == 0):
            return t_rows[k], False  # the drafter reads x_k with the next block instead
        if self.config.delta_source != "scd" and len(block.full_rows) <= k:
            block.full_rows.append(self.draft.forward([block.drafter_tokens[-1]])[0])  # a_{k+1}, only now it is needed
        a_row = block.full_rows[k] if len(block.full_rows) > k else None
        self._settle(t_rows, b_rows, None if a_row is None else a_row[None], [k])
        return self._target(t_rows[k], a_row, b_rows[k]), True

    def _draft_tokens(self, k_target: int) -> DraftBlock:
        """Drafter proposes up to k_target tokens; stops early at EOS, low confidence, or before a decision point."""
        # ahead: x_1..x_{k-1} and, for a fused bonus, x_k are fed one at a time after this forward
        block = DraftBlock(full_rows=[self.draft.forward(self._unread(self.draft), keep=1, ahead=k_target)[0]])
        allowed = self._allowed()
        block.decision_now = (self._forced_decision or self._decision_before([], allowed)
                              or self._entropy_decision(block.full_rows[0]))
        self._forced_decision = False
        while not block.decision_now and len(block) < k_target:
            drafter_allowed = self.bridge.drafter_allowed(allowed) if self.bridge else allowed
            if drafter_allowed is not None and not drafter_allowed.any():
                break  # nothing the drafter can spell is allowed here: the verifier takes this position
            block.masks.append(allowed)
            row = self._masked(block.full_rows[-1], drafter_allowed)
            q = None if self.config.greedy else torch.softmax(self._process(row), dim=-1)
            x = int(row.argmax()) if q is None else int(torch.multinomial(q, 1, generator=self._rng))
            block.drafter_tokens.append(x)
            x = self.bridge.to_verifier[x] if self.bridge else x
            block.tokens.append(self._advance(x))
            if q is not None:
                block.proposals.append(q)
            if x in self.eos_ids:
                break
            allowed = self._allowed()  # at the next position
            block.decision_next = self._decision_before(block.tokens, allowed)
            if block.decision_next or len(block) == k_target or self._unsure(row, q):
                break
            block.full_rows.append(self.draft.forward([block.drafter_tokens[-1]])[0])
            if self._entropy_decision(block.full_rows[-1]):
                block.decision_next = True
                break
        return block

    def _verify(self, block: DraftBlock, t_rows: torch.Tensor, b_rows: torch.Tensor | None):
        """Fuse, gate and judge the k draft positions. Returns (the verification, accepted count, entropy cut)."""
        cfg = self.config
        k = len(block)
        draft_ids = torch.tensor(block.tokens, device=t_rows.device)
        a = torch.stack(block.full_rows[:k])  # [k, drafter vocab]
        self._settle(t_rows, b_rows, a, list(range(k)))
        target, exponent = t_rows[:k], None
        if b_rows is not None:
            divergence = fusion.jsd(a, b_rows[:k])  # recorded in the stats, and the paper's gate reads it too
            fused = self._fuse(target, a, b_rows[:k], draft_ids, divergence)
            exponent = (fusion.gate_exponent(cfg.divergence, a, b_rows[:k], cfg.cda_lambda, jsd_rows=divergence)
                        if cfg.cda else None)
        else:
            fused = target
        if self.constraint is not None:
            mask = ~torch.stack(block.masks)
            target, fused = target.masked_fill(mask, float("-inf")), fused.masked_fill(mask, float("-inf"))
        if not cfg.greedy:  # top-k/top-p shape what is drawn; the ratio compares the two models' beliefs
            target, fused = target / cfg.temperature, self._process(fused)
        base = None
        if self.rule.needs_base:  # p_S(d | the verifier's view): the contrast stream, or the drafter itself
            base = self._base_at_draft(b_rows[:k] if b_rows is not None else a, block)
        proposal = None if cfg.greedy else self._lift(torch.stack(block.proposals))
        verification = Verification(draft_ids, target, fused, base, proposal)
        gamma_eff = fusion.gated_gamma(cfg.gamma, exponent)
        if cfg.greedy:
            accepted = self.rule.accept_greedy(verification, gamma_eff)
            without_gate = self.rule.accept_greedy(verification, cfg.gamma)
        else:
            uniforms = torch.rand(k, generator=self._rng, device=t_rows.device)
            accepted = self.rule.accept_sampled(verification, gamma_eff, uniforms)
            without_gate = self.rule.accept_sampled(verification, cfg.gamma, uniforms)
        n = leading_accepts(accepted)
        self.stats.gate_only_accepts += int((accepted[:n] & ~without_gate[:n]).sum())
        self.stats.accepted_off_verifier_top += int((draft_ids[:n] != target[:n].argmax(dim=-1)).sum())
        return verification, n, self._entropy_cut(fused, n)

    def _settle(self, t_rows: torch.Tensor, b_rows: torch.Tensor | None, a: torch.Tensor | None,
                rows: list[int]) -> None:
        """Rows a server truncated to its top N (remote.py): a token it did not return has t ≤ t_N, so it can beat
        the best exactly known t + β·δ only if t_N + β·δ does; fetch the exact t (and b) of every such token, in
        place, so that greedy choices on t + β·δ are those of whole rows (given δ, exact with a local drafter)."""
        t = t_rows[rows]
        unreturned = self.verify.unreturned(t)
        if unreturned is None or b_rows is None or not self.config.greedy or not self._fusing:
            return
        floor = self.verify.floors(t)
        delta = self._delta(t, a, b_rows[rows])
        exact = ~unreturned
        best = (t + self.config.beta * delta).masked_fill(~exact, float("-inf")).amax(-1, keepdim=True)
        reach = (floor + self.config.beta * delta).masked_fill(exact, float("-inf"))
        wanted = {}
        for i, row in enumerate(rows):
            top = reach[i].topk(min(MAX_FILL_IN, reach.shape[-1]))
            tokens = top.indices[top.values > best[i]].tolist()
            if tokens:
                wanted[row] = tokens
        if wanted:
            self.verify.exact(t_rows, wanted)
            self.contrast.exact(b_rows, wanted)

    def _fuse(self, target: torch.Tensor, a: torch.Tensor, b: torch.Tensor, draft_ids: torch.Tensor,
              divergence: torch.Tensor) -> torch.Tensor:
        delta = self._delta(target, a, b)
        self._record_fusion(None if delta is None else delta.gather(-1, draft_ids[:, None]).abs(), divergence)
        return target if delta is None else fusion.fuse(target, delta, self.config.beta)

    def _delta(self, target, a, b) -> torch.Tensor | None:
        """δ lifted onto the verifier's vocabulary by the configured source; None when nothing is fused (β = 0)."""
        if self.config.beta == 0:
            return None
        source = self.config.delta_source
        streams = {"full": self.draft, "comp": self.contrast, "target": self.verify}
        if source == "scd":
            return fusion.delta_from(source, None, b, target, self._bounded(streams))  # a bridge refuses "scd"
        return self._lift(fusion.delta_from(source, a, b, read=self._bounded(streams)))

    @staticmethod
    def _bounded(streams: dict):
        """δ reads a token a server's row did not return at the row's bound, the most it can have, not at the
        spread estimate: ~1e-6 for a token just outside the drafter's top 200 made δ ≈ 6 and flipped a choice;
        at the bound both rows of a difference err towards δ = 0."""
        def read(name: str, log_p: torch.Tensor) -> torch.Tensor:
            unreturned = streams[name].unreturned(log_p)
            return log_p if unreturned is None else torch.where(unreturned, streams[name].floors(log_p), log_p)
        return read

    def _base_at_draft(self, rows: torch.Tensor, block: DraftBlock) -> torch.Tensor:
        """softmax of the drafter's rows on the verifier's view (grammar-masked as the drafts were, temperature-scaled
        as the target is), at each draft token in the drafter's ids."""
        if self.constraint is not None:
            masks = [self.bridge.drafter_allowed(m) if self.bridge else m for m in block.masks]
            rows = rows.masked_fill(~torch.stack(masks), float("-inf"))
        if not self.config.greedy:
            rows = rows / self.config.temperature
        ids = torch.tensor(block.drafter_tokens, device=rows.device)
        return torch.softmax(rows, dim=-1).gather(-1, ids[:, None]).squeeze(-1)

    def _entropy_cut(self, fused: torch.Tensor, n: int) -> int | None:
        """The first slot ≥ 1 among the committed positions whose target entropy tags a decision point."""
        if not self.policy or self.policy.entropy_threshold is None or n == 0:
            return None
        rows = fused[1: n + 1]
        hot = (fusion.entropy(rows) > self.policy.entropy_threshold).nonzero()
        return 1 + int(hot[0]) if len(hot) else None

    def _record_block(self, k: int, kept: int, emitted) -> None:
        """Per block: drafts and accepted tokens, and where the token the verifier emitted came from."""
        s = self.stats
        s.blocks += 1
        s.drafted += k
        s.accepted += kept
        s.accepted_lengths[kept] += 1
        if emitted is None:
            s.block_emissions.append("none")
            return
        token, verifier_row, fused = emitted
        s.block_emissions.append("fused" if fused else "verifier")
        if fused and self.config.greedy and token != int(verifier_row.argmax()):
            s.fusion_changed += 1

    @property
    def _fusing(self) -> bool:
        return self.contrast is not None and self.config.beta != 0

    # -- helpers ---------------------------------------------------------------------------------------------

    def _target(self, t_row, a_row, b_row) -> torch.Tensor:
        """t + β·δ at one position (the bonus)."""
        if a_row is not None:
            self._record_fusion(None, fusion.jsd(a_row[None], b_row[None]))
        delta = self._delta(t_row[None], None if a_row is None else a_row[None], b_row[None])
        return t_row if delta is None else fusion.fuse(t_row, delta[0], self.config.beta)

    def _lift(self, rows: torch.Tensor) -> torch.Tensor:
        """Drafter-vocabulary rows (δ, q) onto the verifier's vocabulary; the identity without a bridge."""
        return self.bridge.lift(rows) if self.bridge else rows

    def _allowed(self) -> torch.Tensor | None:
        return None if self.constraint is None else self.constraint.allowed()[: self.verify.vocab_size]

    @staticmethod
    def _masked(row: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        return row if allowed is None else row.masked_fill(~allowed.to(row.device), float("-inf"))

    def _advance(self, token: int) -> int:
        """Move the grammar state over a drafted or committed token; returns the token."""
        if self.constraint is not None:
            self.constraint.accept(token)
        return token

    def _choose(self, row: torch.Tensor) -> int:
        if self.config.greedy:
            return int(row.argmax())
        return int(torch.multinomial(torch.softmax(self._process(row), dim=-1), 1, generator=self._rng))

    def _process(self, logits: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        return fusion.process(logits, cfg.temperature, cfg.top_k, cfg.top_p)

    def _unsure(self, row: torch.Tensor, q: torch.Tensor | None) -> bool:
        if not self.config.draft_confidence:
            return False
        top = float(q.max()) if q is not None else float(torch.softmax(row, dim=-1).max())
        return top < self.config.draft_confidence

    def _decision_before(self, drafts: list[int], allowed: torch.Tensor | None) -> bool:
        """Is the position after `drafts` a decision point? (text triggers, or the grammar branching there)"""
        if not self.policy:
            return False
        if self.policy.grammar_branches(allowed, self.tokenizer):
            return True
        if not self.policy.triggers:
            return False
        ids = (self._tail + drafts)[-self.policy.lookback_tokens:]
        return self.policy.text_triggers(self.tokenizer.decode(ids))

    def _entropy_decision(self, row: torch.Tensor) -> bool:
        return bool(self.policy and self.policy.entropy_triggers(float(fusion.entropy(row))))

    def _record_fusion(self, delta_at_draft: torch.Tensor | None, divergence: torch.Tensor) -> None:
        s = self.stats
        if delta_at_draft is not None:
            s.delta_abs_sum += float(delta_at_draft.sum())
            s.delta_abs_max = max(s.delta_abs_max, float(delta_at_draft.max()))
        s.jsd_sum += float(divergence.sum())
        s.jsd_max = max(s.jsd_max, float(divergence.max()))
        s.fused_positions += divergence.numel()

    def _prompt(self, stream: KVStream) -> list[int]:
        return self.prompts[stream.view] if stream.role == "verifier" else self.drafter_prompts[stream.view]

    def _generated(self, stream: KVStream) -> list[int]:
        return self.transcript.tokens if self.transcript is not None and stream.role == "drafter" else self.generated

    def _unread(self, stream: KVStream) -> list[int]:
        """Committed tokens this stream has not read yet: the last one, or two when the drafter skipped x_k."""
        prompt, generated = self._prompt(stream), self._generated(stream)
        start = len(stream)
        return generated[start - len(prompt):] if start >= len(prompt) else prompt[start:] + generated

    @property
    def streams(self) -> list[KVStream]:
        return [s for s in (self.verify, self.draft, self.contrast) if s is not None]

    def _commit(self, committed: list[Commit]) -> list[int]:
        tokens = []
        for token, slot, source, decision in committed:
            tokens.append(token)
            self.stats.record_commit(slot, source, decision)
            if token in self.eos_ids:
                self.finish_reason = "stop"
                break
        self.generated.extend(tokens)
        if self.transcript is not None:
            self.transcript.extend(tokens)
            self.stats.bridge_resyncs = self.transcript.resyncs
        if self.finish_reason is None and len(self.generated) >= self.max_new_tokens:
            self.finish_reason = "length"
        if self.policy:
            self._tail = (self._tail + tokens)[-self.policy.lookback_tokens:]
        for stream in self.streams:
            stream.rollback(self._still_valid(stream))
        return tokens

    def _still_valid(self, stream: KVStream) -> int:
        """How much of a stream's cache spells the committed sequence, all but its last token (fed next block).
        Rejected drafts fail the comparison; so does a drafter tail that a bridge re-encoded."""
        prompt, generated = self._prompt(stream), self._generated(stream)
        if len(stream) <= len(prompt):
            return len(stream)
        read = stream.ids[len(prompt):]
        same = next((i for i, (a, b) in enumerate(zip(read, generated)) if a != b), min(len(read), len(generated)))
        return min(len(prompt) + same, len(prompt) + len(generated) - 1)

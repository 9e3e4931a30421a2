"""The decoding loop of one call: draft → verify → accept → emit → commit (docs/design.md §3).

One `DecodingLoop` lives for one call; tests/reference_decoder.py is the same algorithm without caches. Its streams
carry their caches from earlier calls; every block ends with all streams rolled back to the committed length, so
stopping between blocks always leaves them consistent. Three concerns live beside the algorithm, each in its own
object: decision points (`DecisionSchedule`), a drafter with another vocabulary (`VocabularyBridge`, or
`SameVocabulary`), and rows a server truncated (`row_reader`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from . import fusion
from .acceptance import RULES, Verification, leading_accepts
from .bridge import DraftTranscript, SameVocabulary, VocabularyBridge
from .config import GenerationConfig
from .constraints import TokenConstraint
from .decisions import DecisionSchedule
from .remote_stream import row_reader
from .stats import ACCEPTED, BONUS, CORRECTION, VERIFIER, GenerationStats
from .streams import Stream, forward_together


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


class Rows(NamedTuple):
    """What the verifier (t) and the drafter on the verifier's view (b) make of a block: k + 1 rows each."""

    target: torch.Tensor  # [k+1, vocab]
    contrast: torch.Tensor | None  # [k+1, drafter vocab]; None without a contrast stream


class Verdict(NamedTuple):
    """How many drafts a block keeps."""

    verification: Verification | None  # None for a block without drafts
    accepted: int  # leading drafts the rule accepts
    cut: int | None  # an uncertain position among them: keep only the drafts before it

    @property
    def kept(self) -> int:
        return self.accepted if self.cut is None else self.cut


class Emission(NamedTuple):
    """The token the verifier adds after the kept drafts."""

    token: int
    slot: int
    source: str  # CORRECTION, BONUS, or VERIFIER (a block without drafts)
    verifier_row: torch.Tensor  # the verifier's own row there (stats: did fusion change the choice?)
    fused: bool  # drawn from t + β·δ
    decision: bool = False


class Commit(NamedTuple):
    """One committed token and where it came from."""

    token: int
    slot: int  # its verification slot in the block
    source: str  # ACCEPTED, CORRECTION, BONUS or VERIFIER
    decision: bool = False  # a tagged decision point


class DecodingLoop:
    def __init__(self, *, config: GenerationConfig, prompts: dict[tuple[str, str], list[int]], verify: Stream,
                 draft: Stream | None, contrast: Stream | None, tokenizer, eos_ids: set[int], max_new_tokens: int,
                 stats: GenerationStats, constraint: TokenConstraint | None = None,
                 bridge: VocabularyBridge | None = None):
        self.config = config  # resolved (AsymSpecEngine.decoding)
        self.rule = RULES[config.acceptance]
        self.prompts = prompts  # (role, view) -> prompt ids, in the drafter's own tokens across a bridge
        self.verify, self.draft, self.contrast = verify, draft, contrast
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens
        self.stats = stats
        stats.acceptance = self.rule.name
        self.constraint = constraint  # grammar state: masks drafts and targets alike, rolled back on rejection
        self.bridge = bridge or SameVocabulary()
        self.transcript = DraftTranscript(self.bridge)  # the committed tokens as the drafter reads them
        self.decisions = DecisionSchedule(config.decisions, tokenizer, prompts["verifier", verify.view])
        self.row_reader = row_reader(verify, draft, contrast, beta=config.beta, settles=config.greedy and self._fusing)
        self.generated: list[int] = []
        self.finish_reason: str | None = None
        self.k = min(config.k_max, 4) if config.adaptive_k else config.k_max
        self._rng = torch.Generator(device=verify.device)
        self._rng.manual_seed(config.seed if config.seed is not None else int(torch.seed() % 2**63))

    def run(self) -> Iterator[list[int]]:
        """Yield the tokens committed by each block until EOS or the token budget."""
        synced: list[Stream] = []
        for stream in self.streams:  # the verifier first: an identical drafter copies its prompt cache
            stream.sync(self._prompt(stream), donors=synced)
            synced.append(stream)
        while self.finish_reason is None:
            committed = self._speculative_block() if self.draft else self._verifier_step()
            yield self._commit(committed)

    # -- one block -------------------------------------------------------------------------------------------

    def _speculative_block(self) -> list[Commit]:
        block = self._draft(self._block_size())
        rows = self._verify(block)
        verdict = self._accept(block, rows)
        emission = self._emit(block, rows, verdict)
        return self._kept(block, verdict, emission)

    def _verifier_step(self) -> list[Commit]:
        """No drafter: the verifier decodes one token at slot 0."""
        allowed = self._allowed()
        left = self.max_new_tokens - len(self.generated) - 1  # single-token forwards likely to follow
        row = self._masked(self.verify.forward(self._unread(self.verify), keep=1, ahead=left)[0], allowed)
        decision = self.decisions.before([], allowed) or self.decisions.uncertain(row)
        return [Commit(self._advance(self._choose(row)), 0, VERIFIER, decision)]

    # 1. draft

    def _block_size(self) -> int:
        rollback_cap = getattr(self.constraint, "max_rollback_tokens", None) or self.k
        return min(self.k, rollback_cap, self.max_new_tokens - len(self.generated) - 1)

    def _draft(self, k_target: int) -> DraftBlock:
        """Drafter proposes up to k_target tokens; stops early at EOS, low confidence, or before a decision point."""
        # ahead: x_1..x_{k-1} and, for a fused bonus, x_k are fed one at a time after this forward
        block = DraftBlock(full_rows=[self.draft.forward(self._unread(self.draft), keep=1, ahead=k_target)[0]])
        allowed = self._allowed()
        block.decision_now = self.decisions.at_block_start(allowed, block.full_rows[0])
        while not block.decision_now and len(block) < k_target:
            drafter_allowed = self.bridge.drafter_allowed(allowed)
            if drafter_allowed is not None and not drafter_allowed.any():
                break  # nothing the drafter can spell is allowed here: the verifier takes this position
            block.masks.append(allowed)
            row = self._masked(block.full_rows[-1], drafter_allowed)
            q = None if self.config.greedy else torch.softmax(self._process(row), dim=-1)
            x = int(row.argmax()) if q is None else int(torch.multinomial(q, 1, generator=self._rng))
            block.drafter_tokens.append(x)
            x = self._advance(self.bridge.to_verifier[x])
            block.tokens.append(x)
            if q is not None:
                block.proposals.append(q)
            if x in self.eos_ids:
                break
            allowed = self._allowed()  # at the next position
            block.decision_next = self.decisions.before(block.tokens, allowed)
            if block.decision_next or len(block) == k_target or self._unsure(row, q):
                break
            block.full_rows.append(self.draft.forward([block.drafter_tokens[-1]])[0])
            if self.decisions.uncertain(block.full_rows[-1]):
                block.decision_next = True
                break
        return block

    # 2. verify

    def _verify(self, block: DraftBlock) -> Rows:
        """The verifier reads the drafts on its view, and the drafter on the same view beside it (the contrast):
        one forward each, on servers sent at once."""
        k = len(block)
        calls = [(self.verify, self._unread(self.verify) + block.tokens, k + 1)]
        if self.contrast:
            calls.append((self.contrast, self._unread(self.contrast) + block.drafter_tokens, k + 1))
        return Rows(*(forward_together(calls) + [None])[:2])

    # 3. accept

    def _accept(self, block: DraftBlock, rows: Rows) -> Verdict:
        """The rule judges the k drafts (fused, gated); the grammar forgets the drafts not kept."""
        k = len(block)
        if not k:
            return Verdict(None, 0, None)
        verification, gamma_eff = self._verification(block, rows)
        # one run of the rule at γ_eff and at γ itself: the second only counts what the gate accepted
        gammas = torch.stack(torch.broadcast_tensors(torch.as_tensor(gamma_eff, dtype=torch.float64),
                                                     torch.full((k,), self.config.gamma, dtype=torch.float64)))
        if self.config.greedy:
            accepted, without_gate = self.rule.accept_greedy(verification, gammas)
        else:
            uniforms = torch.rand(k, generator=self._rng, device=rows.target.device)
            accepted, without_gate = self.rule.accept_sampled(verification, gammas, uniforms)
        n = leading_accepts(accepted)
        self.stats.gate_only_accepts += int((accepted[:n] & ~without_gate[:n]).sum())
        self.stats.accepted_off_verifier_top += int((verification.drafts[:n] !=
                                                     verification.target[:n].argmax(dim=-1)).sum())
        verdict = Verdict(verification, n, self.decisions.cut(verification.fused, n))
        if self.constraint is not None and verdict.kept < k:
            self.constraint.rollback(k - verdict.kept)
        return verdict

    def _verification(self, block: DraftBlock, rows: Rows) -> tuple[Verification, torch.Tensor | float]:
        """The block as the rule reads it (fused, grammar-masked, temperature-scaled), and γ_eff per position."""
        cfg = self.config
        k = len(block)
        draft_ids = torch.tensor(block.tokens, device=rows.target.device)
        a = torch.stack(block.full_rows[:k])  # [k, drafter vocab]
        b = rows.contrast[:k] if rows.contrast is not None else None
        self.row_reader.settle(rows.target, rows.contrast, a, list(range(k)), self._delta)
        target, fused, exponent = rows.target[:k], rows.target[:k], None
        if b is not None:
            divergence = fusion.jsd(a, b)  # recorded in the stats, and the paper's gate reads it too
            delta = self._delta(target, a, b)
            self._record_fusion(None if delta is None else delta.gather(-1, draft_ids[:, None]).abs(), divergence)
            fused = target if delta is None else fusion.fuse(target, delta, cfg.beta)
            if cfg.cda:
                exponent = fusion.gate_exponent(cfg.divergence, a, b, cfg.cda_lambda, jsd_rows=divergence)
        if self.constraint is not None:
            mask = ~torch.stack(block.masks)
            target, fused = target.masked_fill(mask, float("-inf")), fused.masked_fill(mask, float("-inf"))
        if not cfg.greedy:  # top-k/top-p shape what is drawn; the ratio compares the two models' beliefs
            target, fused = target / cfg.temperature, self._process(fused)
        base = None
        if self.rule.needs_base:  # p_S(d | the verifier's view): the contrast stream, or the drafter itself
            base = self._base_at_draft(b if b is not None else a, block)
        proposal = None if cfg.greedy else self.bridge.lift(torch.stack(block.proposals))
        return (Verification(draft_ids, target, fused, base, proposal),
                fusion.gated_gamma(cfg.gamma, exponent))

    # 4. emit

    def _emit(self, block: DraftBlock, rows: Rows, verdict: Verdict) -> Emission | None:
        """The verifier's token after the kept drafts: the correction where a draft was rejected, else the bonus
        after the block. None where the next position is a decision point (or the block ended at EOS): the next
        block's verification starts there."""
        k, n = len(block), verdict.accepted
        if verdict.cut is not None:
            self.decisions.tag_next()
            return None
        if n < k:
            token = self.rule.correction(verdict.verification, n, self.config.greedy, self._rng)
            return Emission(token, n, CORRECTION, verdict.verification.target[n], self._fusing)
        if block.decision_next or (block.tokens and block.tokens[-1] in self.eos_ids):
            return None
        row, fused = self._bonus_row(block, rows)
        allowed = self._allowed()
        row = self._masked(row, allowed)
        if k and self.decisions.uncertain(row):
            self.decisions.tag_next()
            return None
        return Emission(self._choose(row), k, BONUS if k else VERIFIER, self._masked(rows.target[k], allowed), fused,
                        block.decision_now)

    def _bonus_row(self, block: DraftBlock, rows: Rows) -> tuple[torch.Tensor, bool]:
        """The row the token after a fully accepted block comes from, and whether it is fused: t + β·δ with
        `fuse_bonus` (one more drafter step when δ needs a_{k+1}), else the verifier's own logits. A block
        without drafts (a decision point at slot 0) emits from t + β·δ, as a rejection does."""
        k = len(block)
        if rows.contrast is None or not (self.config.fuse_bonus or k == 0):
            return rows.target[k], False  # the drafter reads x_k with the next block instead
        if self.config.delta_source != "scd" and len(block.full_rows) <= k:
            block.full_rows.append(self.draft.forward([block.drafter_tokens[-1]])[0])  # a_{k+1}, only now it is needed
        a_row = block.full_rows[k] if len(block.full_rows) > k else None
        self.row_reader.settle(rows.target, rows.contrast, None if a_row is None else a_row[None], [k], self._delta)
        return self._target(rows.target[k], a_row, rows.contrast[k]), True

    # 5. commit

    def _kept(self, block: DraftBlock, verdict: Verdict, emission: Emission | None) -> list[Commit]:
        """The kept drafts and the emitted token, in order; the block's statistics; the next block's size."""
        committed = [Commit(x, slot, ACCEPTED) for slot, x in enumerate(block.tokens[:verdict.kept])]
        if emission is not None:
            committed.append(Commit(self._advance(emission.token), emission.slot, emission.source, emission.decision))
        k = len(block)
        if k:
            self._record_block(k, verdict.kept, emission)
            if self.config.adaptive_k:
                self.k = min(self.config.k_max, self.k + 2) if verdict.kept == k else max(1, self.k - 1)
        return committed

    def _commit(self, committed: list[Commit]) -> list[int]:
        tokens = []
        for token, slot, source, decision in committed:
            tokens.append(token)
            self.stats.record_commit(slot, source, decision)
            if token in self.eos_ids:
                self.finish_reason = "stop"
                break
        self.generated.extend(tokens)
        self.transcript.extend(tokens)
        self.stats.bridge_resyncs = self.transcript.resyncs
        if self.finish_reason is None and len(self.generated) >= self.max_new_tokens:
            self.finish_reason = "length"
        self.decisions.extend(tokens)
        for stream in self.streams:
            stream.rollback(self._still_valid(stream))
        return tokens

    # -- fusion ----------------------------------------------------------------------------------------------

    @property
    def _fusing(self) -> bool:
        return self.contrast is not None and self.config.beta != 0

    def _target(self, t_row, a_row, b_row) -> torch.Tensor:
        """t + β·δ at one position (the bonus)."""
        if a_row is not None:
            self._record_fusion(None, fusion.jsd(a_row[None], b_row[None]))
        delta = self._delta(t_row[None], None if a_row is None else a_row[None], b_row[None])
        return t_row if delta is None else fusion.fuse(t_row, delta[0], self.config.beta)

    def _delta(self, target, a, b) -> torch.Tensor | None:
        """δ lifted onto the verifier's vocabulary by the configured source; None when nothing is fused (β = 0)."""
        if self.config.beta == 0:
            return None
        source = self.config.delta_source
        if source == "scd":
            return fusion.delta_from(source, None, b, target, self.row_reader.read)  # a bridge refuses "scd"
        return self.bridge.lift(fusion.delta_from(source, a, b, read=self.row_reader.read))

    def _base_at_draft(self, rows: torch.Tensor, block: DraftBlock) -> torch.Tensor:
        """softmax of the drafter's rows on the verifier's view (grammar-masked as the drafts were, temperature-scaled
        as the target is), at each draft token in the drafter's ids."""
        if self.constraint is not None:
            rows = rows.masked_fill(~torch.stack([self.bridge.drafter_allowed(m) for m in block.masks]), float("-inf"))
        if not self.config.greedy:
            rows = rows / self.config.temperature
        ids = torch.tensor(block.drafter_tokens, device=rows.device)
        return torch.softmax(rows, dim=-1).gather(-1, ids[:, None]).squeeze(-1)

    # -- statistics ------------------------------------------------------------------------------------------

    def _record_block(self, k: int, kept: int, emission: Emission | None) -> None:
        """Per block: drafts and accepted tokens, and where the token the verifier emitted came from."""
        s = self.stats
        s.blocks += 1
        s.drafted += k
        s.accepted += kept
        s.accepted_lengths[kept] += 1
        if emission is None:
            s.block_emissions.append("none")
            return
        s.block_emissions.append("fused" if emission.fused else "verifier")
        if emission.fused and self.config.greedy and emission.token != int(emission.verifier_row.argmax()):
            s.fusion_changed += 1

    def _record_fusion(self, delta_at_draft: torch.Tensor | None, divergence: torch.Tensor) -> None:
        s = self.stats
        if delta_at_draft is not None:
            s.delta_abs_sum += float(delta_at_draft.sum())
            s.delta_abs_max = max(s.delta_abs_max, float(delta_at_draft.max()))
        s.jsd_sum += float(divergence.sum())
        s.jsd_max = max(s.jsd_max, float(divergence.max()))
        s.fused_positions += divergence.numel()

    # -- tokens, masks, sampling -----------------------------------------------------------------------------

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

    # -- what each stream has read ---------------------------------------------------------------------------

    @property
    def streams(self) -> list[Stream]:
        return [s for s in (self.verify, self.draft, self.contrast) if s is not None]

    def _prompt(self, stream: Stream) -> list[int]:
        return self.prompts[stream.role, stream.view]

    def _generated(self, stream: Stream) -> list[int]:
        return self.transcript.tokens if stream.role == "drafter" else self.generated

    def _unread(self, stream: Stream) -> list[int]:
        """Committed tokens this stream has not read yet: the last one, or two when the drafter skipped x_k."""
        prompt, generated = self._prompt(stream), self._generated(stream)
        start = len(stream)
        return generated[start - len(prompt):] if start >= len(prompt) else prompt[start:] + generated

    def _still_valid(self, stream: Stream) -> int:
        """How much of a stream's cache spells the committed sequence, all but its last token (fed next block).
        Rejected drafts fail the comparison; so does a drafter tail that a bridge re-encoded."""
        prompt, generated = self._prompt(stream), self._generated(stream)
        if len(stream) <= len(prompt):
            return len(stream)
        read = stream.ids[len(prompt):]
        same = next((i for i, (a, b) in enumerate(zip(read, generated)) if a != b), min(len(read), len(generated)))
        return min(len(prompt) + same, len(prompt) + len(generated) - 1)

"""The decoding loop of one call: draft, contrast, verify, fuse, accept, commit, roll back (DESIGN §3).

One `DecodingLoop` lives for one call. Its streams carry their caches from earlier calls; every block ends with
all streams rolled back to the committed length, so stopping between blocks always leaves them consistent.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from . import fusion
from .bridge import DraftTranscript, VocabularyBridge
from .config import GenerationConfig
from .constraints import TokenConstraint
from .stats import ACCEPTED, BONUS, CORRECTION, VERIFIER, GenerationStats
from .streams import KVStream


class DecodingLoop:
    def __init__(self, *, config: GenerationConfig, prompts: dict[str, list[int]], verify: KVStream,
                 draft: KVStream | None, contrast: KVStream | None, tokenizer, eos_ids: set[int],
                 max_new_tokens: int, stats: GenerationStats, constraint: TokenConstraint | None = None,
                 bridge: VocabularyBridge | None = None, drafter_prompts: dict[str, list[int]] | None = None):
        self.config = config
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
        self.constraint = constraint  # grammar state: masks drafts and targets alike, rolled back on rejection
        self.generated: list[int] = []
        self.finish_reason: str | None = None
        self.policy = config.decisions
        self.k = min(config.k_max, 4) if config.adaptive_k else config.k_max
        self._forced_decision = False  # the verifier's entropy tagged the next position
        lookback = self.policy.lookback_tokens if self.policy else 0
        self._tail = list(prompts[verify.view][-lookback:]) if lookback else []
        self._rng = torch.Generator(device=next(verify.model.parameters()).device)
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

    def _verifier_step(self) -> list[tuple[int, int, str, bool]]:
        """No drafter: the verifier decodes one token at slot 0."""
        allowed = self._allowed()
        row = self._masked(self.verify.forward(self._unread(self.verify), keep=1)[0], allowed)
        decision = self._decision_before([], allowed) or self._entropy_decision(row)
        return [(self._advance(self._choose(row)), 0, VERIFIER, decision)]

    def _speculative_block(self) -> list[tuple[int, int, str, bool]]:
        cfg = self.config
        k_target = min(self.k, self.max_new_tokens - len(self.generated) - 1)
        drafts, drafter_drafts, a_rows, q_rows, masks, decision_now, decision_next = self._draft_tokens(k_target)
        k = len(drafts)
        t_rows = self.verify.forward(self._unread(self.verify) + drafts, keep=k + 1)  # [k+1, vocab]
        b_rows = (self.contrast.forward(self._unread(self.contrast) + drafter_drafts, keep=k + 1)  # [k+1, drafter vocab]
                  if self.contrast else None)

        n, cut = k, None
        if k:
            fused, q, n, cut = self._accept(drafts, a_rows[:k], b_rows, t_rows, q_rows, masks)
        kept = cut if cut is not None else n
        committed = [(x, slot, ACCEPTED, False) for slot, x in enumerate(drafts[:kept])]
        if self.constraint is not None and kept < k:
            self.constraint.rollback(k - kept)
        if cut is not None:
            self._forced_decision = True
        elif n < k:
            correction = self._correction(fused[n], q[n] if q is not None else None)
            committed.append((self._advance(correction), n, CORRECTION, False))
        elif not decision_next and not (drafts and drafts[-1] in self.eos_ids):
            if b_rows is None:
                row = t_rows[k]  # no fusion: the drafter reads x_k with the next block instead
            else:
                if len(a_rows) <= k:  # a_{k+1}: one more drafter step, only now that it is needed
                    a_rows.append(self.draft.forward([drafter_drafts[-1]])[0])
                row = self._target(t_rows[k], a_rows[k], b_rows[k])
            row = self._masked(row, self._allowed())
            if k and self._entropy_decision(row):
                self._forced_decision = True
            else:
                committed.append((self._advance(self._choose(row)), k, BONUS if k else VERIFIER, decision_now))
        if k:
            self.stats.blocks += 1
            self.stats.drafted += k
            accepted = cut if cut is not None else n
            self.stats.accepted += accepted
            self.stats.accepted_lengths[accepted] += 1
            if cfg.adaptive_k:
                self.k = min(cfg.k_max, self.k + 2) if accepted == k else max(1, self.k - 1)
        return committed

    def _draft_tokens(self, k_target: int):
        """Drafter proposes up to k_target tokens; stops early at EOS, low confidence, or before a decision point.

        Returns the drafts in the verifier's ids and in the drafter's (the same list without a bridge)."""
        a_rows = [self.draft.forward(self._unread(self.draft), keep=1)[0]]
        allowed = self._allowed()
        decision_now = (self._forced_decision or self._decision_before([], allowed)
                        or self._entropy_decision(a_rows[0]))
        self._forced_decision = False
        drafts: list[int] = []
        drafter_drafts: list[int] = []
        q_rows: list[torch.Tensor] = []
        masks: list[torch.Tensor | None] = []  # the grammar's allowed tokens at each draft position
        decision_next = False
        while not decision_now and len(drafts) < k_target:
            drafter_allowed = self.bridge.drafter_allowed(allowed) if self.bridge else allowed
            if drafter_allowed is not None and not drafter_allowed.any():
                break  # nothing the drafter can spell is allowed here: the verifier takes this position
            masks.append(allowed)
            row = self._masked(a_rows[-1], drafter_allowed)
            q = None if self.config.greedy else torch.softmax(self._process(row), dim=-1)
            x = int(row.argmax()) if q is None else int(torch.multinomial(q, 1, generator=self._rng))
            drafter_drafts.append(x)
            x = self.bridge.to_verifier[x] if self.bridge else x
            drafts.append(self._advance(x))
            if q is not None:
                q_rows.append(q)
            if x in self.eos_ids:
                break
            allowed = self._allowed()  # at the next position
            decision_next = self._decision_before(drafts, allowed)
            if decision_next or len(drafts) == k_target or self._unsure(row, q):
                break
            a_rows.append(self.draft.forward([drafter_drafts[-1]])[0])
            if self._entropy_decision(a_rows[-1]):
                decision_next = True
                break
        return drafts, drafter_drafts, a_rows, q_rows, masks, decision_now, decision_next

    def _accept(self, drafts, a_rows, b_rows, t_rows, q_rows, masks):
        """Fuse, gate and accept the k draft positions. Returns (fused rows, q rows, accepted count, entropy cut)."""
        cfg = self.config
        k = len(drafts)
        draft_ids = torch.tensor(drafts, device=t_rows.device)
        a = torch.stack(a_rows)  # [k, vocab]
        divergence = None
        if b_rows is not None:
            delta = self._lift(fusion.delta(a, b_rows[:k]))
            fused = fusion.fuse(t_rows[:k], delta, cfg.beta)
            divergence = fusion.jsd(a, b_rows[:k])
            self._record_fusion(delta.gather(-1, draft_ids[:, None]).abs(), divergence)
        else:
            fused = t_rows[:k]
        if self.constraint is not None:
            fused = fused.masked_fill(~torch.stack(masks), float("-inf"))
        gamma_eff = fusion.gated_gamma(cfg.gamma, divergence if cfg.cda else None)
        q = None
        if cfg.greedy:
            accepted = fusion.accept_greedy(fused, draft_ids, gamma_eff)
            without_gate = fusion.accept_greedy(fused, draft_ids, cfg.gamma)
        else:
            fused = self._process(fused)
            p = torch.softmax(fused, dim=-1)
            q = self._lift(torch.stack(q_rows))
            uniforms = torch.rand(k, generator=self._rng, device=p.device)
            accepted = fusion.accept_sampling(p, q, draft_ids, gamma_eff, uniforms)
            without_gate = fusion.accept_sampling(p, q, draft_ids, cfg.gamma, uniforms)
        n = fusion.leading_accepts(accepted)
        self.stats.gate_only_accepts += int((accepted[:n] & ~without_gate[:n]).sum())
        cut = self._entropy_cut(fused, n)
        return fused, q, n, cut

    def _entropy_cut(self, fused: torch.Tensor, n: int) -> int | None:
        """The first slot ≥ 1 among the committed positions whose target entropy tags a decision point."""
        if not self.policy or self.policy.entropy_threshold is None or n == 0:
            return None
        rows = fused[1: n + 1]
        hot = (fusion.entropy(rows) > self.policy.entropy_threshold).nonzero()
        return 1 + int(hot[0]) if len(hot) else None

    # -- helpers ---------------------------------------------------------------------------------------------

    def _target(self, t_row, a_row, b_row) -> torch.Tensor:
        if b_row is None:
            return t_row
        delta = self._lift(fusion.delta(a_row, b_row))
        self._record_fusion(None, fusion.jsd(a_row[None], b_row[None]))
        return fusion.fuse(t_row, delta, self.config.beta)

    def _lift(self, rows: torch.Tensor) -> torch.Tensor:
        """Drafter-vocabulary rows (δ, q) onto the verifier's vocabulary; the identity without a bridge."""
        return self.bridge.lift(rows) if self.bridge else rows

    def _allowed(self) -> torch.Tensor | None:
        return None if self.constraint is None else self.constraint.allowed()[: self.verify.vocab_size]

    @staticmethod
    def _masked(row: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        return row if allowed is None else row.masked_fill(~allowed, float("-inf"))

    def _advance(self, token: int) -> int:
        """Move the grammar state over a drafted or committed token; returns the token."""
        if self.constraint is not None:
            self.constraint.accept(token)
        return token

    def _correction(self, fused_row: torch.Tensor, q_row: torch.Tensor | None) -> int:
        if q_row is None:
            return int(fused_row.argmax())
        p = torch.softmax(fused_row, dim=-1)  # already processed in _accept
        return int(torch.multinomial(fusion.residual(p, q_row), 1, generator=self._rng))

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

    def _commit(self, committed: list[tuple[int, int, str, bool]]) -> list[int]:
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

"""Token constraints: a grammar state that masks the next token, for structured output and tool calls.

The loop asks `allowed()` at every draft position, applies the same mask to the drafter's proposal and to the
fused target, advances the state over each drafted token and rolls it back over the rejected ones, so
speculation never commits a token the grammar forbids and the output distribution is the constrained target's.
"""

from __future__ import annotations

from typing import Protocol

import torch


class TokenConstraint(Protocol):
    def allowed(self) -> torch.Tensor:
        """Bool mask `[vocab]` of the tokens allowed next."""

    def accept(self, token: int) -> None:
        """Advance over one token (raises if the token is not allowed)."""

    def rollback(self, count: int) -> None:
        """Undo the last `count` accepted tokens."""


class GrammarConstraint:
    """A TokenConstraint backed by an xgrammar compiled grammar (JSON schema, EBNF or structural tag)."""

    def __init__(self, compiled_grammar, max_rollback_tokens: int = 64):
        import xgrammar as xgr

        self.max_rollback_tokens = max_rollback_tokens  # the loop drafts no longer blocks than it can undo
        self._matcher = xgr.GrammarMatcher(compiled_grammar, max_rollback_tokens=max_rollback_tokens)
        self._vocab_size = compiled_grammar.tokenizer_info.vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, self._vocab_size)
        self._shifts = torch.arange(32, dtype=torch.int32)

    def allowed(self) -> torch.Tensor:
        self._matcher.fill_next_token_bitmask(self._bitmask)
        bits = (self._bitmask[0][:, None] >> self._shifts) & 1  # [words, 32], bit i of word w is token 32w + i
        return bits.flatten()[: self._vocab_size].bool()

    def accept(self, token: int) -> None:
        if not self._matcher.accept_token(token):
            raise RuntimeError(f"token {token} violates the grammar (the engine masked it, so this is a bug)")

    def rollback(self, count: int) -> None:
        if count:
            self._matcher.rollback(count)

"""Turning committed token ids into text as they arrive: incremental detokenizing and stop strings."""

from __future__ import annotations


class IncrementalDecoder:
    """Decodes a growing id list without re-decoding it all each time, and never emits half a UTF-8 character."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # decoding restarts here so that merges across token boundaries come out right
        self._read = 0  # text of ids[_prefix:_read] has already been emitted

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        decode = self.tokenizer.decode
        before = decode(self.ids[self._prefix:self._read], skip_special_tokens=True)
        after = decode(self.ids[self._prefix:], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return after[len(before):]
        return ""

    def flush(self) -> str:
        """At the end of generation: whatever is left, even a dangling partial character."""
        decode = self.tokenizer.decode
        before = decode(self.ids[self._prefix:self._read], skip_special_tokens=True)
        after = decode(self.ids[self._prefix:], skip_special_tokens=True)
        self._prefix = self._read = len(self.ids)
        return after[len(before):]


class StopMatcher:
    """Finds stop strings in streamed text; holds back a tail that could still become one."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self._held = ""

    def push(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit, whether a stop string was hit). After a hit, text is cut before the stop."""
        buffer = self._held + text
        hits = [i for i in (buffer.find(s) for s in self.stops) if i >= 0]
        if hits:
            self._held = ""
            return buffer[: min(hits)], True
        hold = self._longest_partial_stop(buffer)
        self._held = buffer[len(buffer) - hold:] if hold else ""
        return buffer[: len(buffer) - hold], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held

    def _longest_partial_stop(self, buffer: str) -> int:
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:n]):
                    best = n
                    break
        return best

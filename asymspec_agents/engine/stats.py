"""What one call did: plain data, with `to_dict()` for frameworks and benchmarks."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

# Where a committed token came from.
ACCEPTED = "accepted"  # a draft token the verifier accepted
CORRECTION = "correction"  # the verifier's token at the first rejected position
BONUS = "bonus"  # the verifier's token after a fully accepted block
VERIFIER = "verifier"  # the verifier decoding alone (no draft in the block)


@dataclass
class StreamStats:
    """One KV stream: a model reading one view."""

    role: str
    view: str
    reused_tokens: int = 0  # prompt tokens served from the prefix cache
    reused_flops: float = 0.0  # what prefilling them would have cost
    prefill_tokens: int = 0
    prefill_forwards: int = 0
    decode_tokens: int = 0
    decode_forwards: int = 0
    decode_sizes: Counter = field(default_factory=Counter)  # tokens per decode forward -> forwards
    decode_partial_logits: Counter = field(default_factory=Counter)  # the same, for forwards keeping only some logits
    flops: float = 0.0  # local models only: a server's work is not counted here
    seconds: float = 0.0  # prefill and decode
    prefill_seconds: float = 0.0
    requests: int = 0  # a model on a server: HTTP requests this stream sent (models/remote.py)
    lookahead_rows: int = 0  # ... forwards served from an earlier generation request, without one
    fill_ins: int = 0  # ... of which asked for exact values a first request did not return (drafts, fused candidates)


@dataclass
class GenerationStats:
    mode: str
    prompt_tokens_full: int = 0
    prompt_tokens_comp: int = 0
    new_tokens: int = 0
    blocks: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance: str = ""  # the acceptance rule ("ratio" or "fused"; docs/design.md §3)
    gate_only_accepts: int = 0  # accepted only because the gate lowered γ
    accepted_off_verifier_top: int = 0  # accepted drafts that are not the verifier's own top token
    block_emissions: list[str] = field(default_factory=list)  # per block: "fused", "verifier" or "none" (drafts only)
    fusion_changed: int = 0  # fused emissions (greedy) that differ from the verifier's own top token
    accepted_lengths: Counter = field(default_factory=Counter)  # accepted tokens per block -> blocks
    decision_points: int = 0
    bridge_resyncs: int = 0  # verifier tokens outside a vocabulary bridge's intersection (drafter re-encoded)
    token_slots: list[int] = field(default_factory=list)  # verification slot of every committed token
    token_sources: list[str] = field(default_factory=list)
    decision_positions: list[int] = field(default_factory=list)  # indices into the generated tokens
    delta_abs_sum: float = 0.0  # |δ| at the drafted token, summed over fused positions
    delta_abs_max: float = 0.0
    jsd_sum: float = 0.0
    jsd_max: float = 0.0
    fused_positions: int = 0
    streams: dict[str, StreamStats] = field(default_factory=dict)
    cache: str = ""  # how the cache pool served the call: "continued", "branched" or "fresh" (pool.py)
    wall_seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def delta_abs_mean(self) -> float:
        return self.delta_abs_sum / self.fused_positions if self.fused_positions else 0.0

    @property
    def jsd_mean(self) -> float:
        return self.jsd_sum / self.fused_positions if self.fused_positions else 0.0

    @property
    def decision_points_at_slot0(self) -> int:
        return sum(1 for i in self.decision_positions if self.token_slots[i] == 0)

    def flops(self, role: str, fresh: bool = False) -> float:
        """FLOPs this call spent in one role's streams; `fresh=True` adds the prefill the caches saved."""
        return sum(s.flops + (s.reused_flops if fresh else 0.0) for s in self.streams.values() if s.role == role)

    def tokens_processed(self, role: str) -> int:
        return sum(s.prefill_tokens + s.decode_tokens for s in self.streams.values() if s.role == role)

    def seconds(self, role: str) -> float:
        return sum(s.seconds for s in self.streams.values() if s.role == role)

    def record_commit(self, slot: int, source: str, decision: bool) -> None:
        if decision:
            self.decision_points += 1
            self.decision_positions.append(self.new_tokens)
        self.token_slots.append(slot)
        self.token_sources.append(source)
        self.new_tokens += 1

    def to_dict(self) -> dict:
        data = asdict(self)
        data["accepted_lengths"] = {int(k): v for k, v in sorted(self.accepted_lengths.items())}
        for name, stream in data["streams"].items():
            for counter in ("decode_sizes", "decode_partial_logits"):
                stream[counter] = {int(k): v for k, v in sorted(getattr(self.streams[name], counter).items())}
        data.update(
            acceptance_rate=self.acceptance_rate,
            delta_abs_mean=self.delta_abs_mean,
            jsd_mean=self.jsd_mean,
            decision_points_at_slot0=self.decision_points_at_slot0,
            verifier_flops=self.flops("verifier"),
            drafter_flops=self.flops("drafter"),
            verifier_seconds=self.seconds("verifier"),
            drafter_seconds=self.seconds("drafter"),
        )
        for name in ("delta_abs_sum", "jsd_sum"):
            data.pop(name)
        return data

"""Training a drafter to be rejected at decision points (docs/design.md §6).

For serving stacks whose verification block size is fixed, a decision token cannot be moved to slot 0 by ending
the block early. Instead the drafter learns, by DPO, to propose a framing the verifier does not pick at decision
points: the verifier rejects it and produces the decision token itself, from its own distribution. Greedy output
is unchanged (speculative decoding is lossless whatever the drafter proposes).

    transcripts = agent_transcripts(tokenizer, count=16, seed=0)         # agent turns with tagged decision points
    pairs = mine_pairs(verifier, tokenizer, transcripts)                  # prompt / chosen (low-ranked) / rejected (top)
    train_adversarial(drafter, tokenizer, pairs, "out/adapter")           # trl DPOTrainer + peft LoRA; saves the adapter
    load_model("bundled", adapter="out/adapter")                          # the drafter with the adapter merged

Needs the `train` extra (`pip install "asymspec-agents[train]"`: trl, peft).
"""

from .evaluate import AgreementReport, LosslessReport, agreement, check_lossless
from .mining import PreferencePair, mine_pairs
from .transcripts import Transcript, agent_transcripts, decision_positions

__all__ = ["AgreementReport", "LosslessReport", "PreferencePair", "Transcript", "agent_transcripts", "agreement",
           "check_lossless", "decision_positions", "mine_pairs"]

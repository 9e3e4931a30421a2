"""`asymspec pair VERIFIER [DRAFTER]`: what a pair is before any weights load.

From each model's config and tokenizer alone (a GGUF is converted once, a bundled drafter assembled once; a model on
a vLLM server is asked for its window and, where this machine can read its folder, its config): whether the two
share a vocabulary or need the vocabulary bridge, both windows, each model's FLOPs per token and their ratio, the
decoding settings a call gets, and the compression from which AsymSpec reads a prompt with fewer FLOPs than the
verifier alone reading it whole.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from .engine.config import GenerationConfig
from .errors import VocabularyMismatchError
from .models import AUTO, DEFAULT_VERIFIER, config_window, is_url, load_tokenizer, resolve_pair
from .models.loading import QUANTIZED, resolve_source
from .models.vocabulary import check_shared_vocabulary

CONTEXT = 4096  # the context length FLOPs per token are given at


@dataclass
class ModelCard:
    name: str
    source: str  # the folder, hub id or URL it loads from
    window: int
    flops: float | None  # per token at CONTEXT tokens of context; None where the config is not readable
    tokenizer: object


def describe(verifier: str = DEFAULT_VERIFIER, drafter: str | None = AUTO) -> dict:
    """The pair's report (what `asymspec pair` prints)."""
    verifier, drafter = resolve_pair(verifier, drafter)
    cards = {"verifier": card(verifier)}
    if drafter is not None:
        cards["drafter"] = card(drafter, tokenizer=cards["verifier"].tokenizer if is_url(drafter) else None)
    report = {role: {"name": c.name, "source": c.source, "window": c.window, "flops_per_token": c.flops}
              for role, c in cards.items()}
    report["context_for_flops"] = CONTEXT
    report["settings"] = settings()
    if drafter is None:
        report["vocabulary"] = None
        return report
    report["vocabulary"] = vocabulary(cards["verifier"].tokenizer, cards["drafter"].tokenizer)
    report["window"] = min(c.window for c in cards.values())
    flops = cards["verifier"].flops, cards["drafter"].flops
    report["drafter_cost"] = flops[1] / flops[0] if None not in flops else None
    report["pays_from_compression"] = break_even(report["drafter_cost"])
    return report


def card(name: str, tokenizer=None) -> ModelCard:
    from transformers import AutoConfig

    if is_url(name):
        from .models import load_model

        model, tokenizer = load_model(name, tokenizer=tokenizer)  # a connection: no weights
        folder = model.root if model.root and Path(model.root).is_dir() else None
        config = AutoConfig.from_pretrained(folder) if folder else None
        return ModelCard(name, name, config_window(model.config), config and flops_per_token(config), model.tokenizer)
    source = QUANTIZED.get(str(name), name)
    folder, _ = resolve_source(source)
    config = AutoConfig.from_pretrained(folder)
    return ModelCard(str(name), folder, config_window(config), flops_per_token(config), load_tokenizer(source))


def flops_per_token(config, context: int = CONTEXT) -> float:
    """2 × the decoder's weights (attention and gated MLP, as Llama, Qwen and Gemma lay them out) and the output
    head, plus attention over `context` earlier tokens: what one decoded token costs."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden, layers = text.hidden_size, text.num_hidden_layers
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * text.intermediate_size
    return 2.0 * (layers * (attention + mlp) + text.vocab_size * hidden) + 4.0 * layers * heads * head_dim * context


def vocabulary(verifier_tokenizer, drafter_tokenizer) -> dict:
    """Shared, or bridged over the tokens both spell with the same bytes (engine/bridge.py)."""
    try:
        return {"shared": True, "tokens": check_shared_vocabulary(verifier_tokenizer, drafter_tokenizer)}
    except VocabularyMismatchError:
        from .engine.bridge import VocabularyBridge

        bridge = VocabularyBridge(verifier_tokenizer, drafter_tokenizer, verifier_vocab=len(verifier_tokenizer),
                                  drafter_vocab=len(drafter_tokenizer), verifier_eos=_eos(verifier_tokenizer),
                                  drafter_eos=_eos(drafter_tokenizer))
        return {"shared": False, "tokens": bridge.shared_text_tokens, "describe": bridge.describe()}


def settings() -> dict:
    """The settings a call in the default mode decodes with (engine/config.py's one table)."""
    config = GenerationConfig().resolved()
    names = ("mode", "acceptance", "beta", "gamma", "cda", "divergence", "k_max", "fuse_bonus", "copy_weight")
    return {name: getattr(config, name) for name in names}


def break_even(drafter_cost: float | None) -> float | None:
    """The compression ρ from which AsymSpec reads a prompt of L tokens with fewer FLOPs than the Ceiling: the
    drafter reads all L and the compressed L/ρ, the verifier only L/ρ, so c_V·L > c_S·L + (c_V + c_S)·L/ρ, i.e.
    ρ > (1 + r)/(1 − r) with r = c_S/c_V (None: never, the drafter costs as much as the verifier)."""
    if drafter_cost is None or drafter_cost >= 1:
        return None
    return (1 + drafter_cost) / (1 - drafter_cost)


def render(report: dict) -> str:
    """The report in lines of at most 80 columns."""
    giga = report["context_for_flops"] // 1000
    lines = []
    for role in ("verifier", "drafter"):
        if role not in report:
            continue
        model = report[role]
        flops = "?" if model["flops_per_token"] is None else f"{model['flops_per_token'] / 1e9:.2f}"
        lines.append(f"{role:9s} {model['name']}")
        lines.append(f"          window {model['window']}, {flops} GFLOPs per token at {giga}k of context")
        lines.append(f"          from {_short(model['source'], 61)}")
    if report["vocabulary"] is None:
        lines.append("no drafter: the verifier decodes alone (modes full and compressed only)")
    else:
        vocab = report["vocabulary"]
        lines.append(f"vocabulary: shared, {vocab['tokens']} tokens" if vocab["shared"]
                     else f"vocabulary: bridged over {vocab['tokens']} tokens with equal bytes")
        cost, pays = report["drafter_cost"], report["pays_from_compression"]
        if cost is not None:
            lines.append(f"drafter per token: {cost:.2f}x the verifier's FLOPs")
            lines.append(f"reads a prompt with fewer FLOPs than the verifier alone from {pays:.1f}x compression"
                         if pays else "no compression makes AsymSpec cheaper: the drafter costs as much as the "
                         "verifier")
    s = report["settings"]
    lines.append(f"settings: {s['mode']}, {s['acceptance']} rule, beta {s['beta']:g}, gamma {s['gamma']:g}, "
                 f"k {s['k_max']},")
    lines.append(f"          gate {s['divergence'] if s['cda'] else 'off'}, bonus "
                 f"{'fused' if s['fuse_bonus'] else 'unfused'}, copy head {s['copy_weight']:g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = describe(args.verifier, None if args.drafter == "none" else args.drafter)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asymspec pair", description=__doc__)
    parser.add_argument("verifier", nargs="?", default=DEFAULT_VERIFIER,
                        help=f"a bundled name, folder, GGUF file, hub id or server URL (default {DEFAULT_VERIFIER})")
    parser.add_argument("drafter", nargs="?", default=AUTO,
                        help="the same forms; auto (default): the verifier's matched drafter; none: no drafter")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _eos(tokenizer) -> set[int]:
    return {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]

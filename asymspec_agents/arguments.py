"""Command-line options that `asymspec generate` and `asymspec serve` share: the pair, threads, and one flag per
GenerationConfig field (with its help and default)."""

from __future__ import annotations

import argparse
from typing import get_args

from .engine.config import CHOICES, setting_fields
from .models import AUTO, DEFAULT_VERIFIER

NO_DRAFTER = "none"


def add_pair(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verifier", default=DEFAULT_VERIFIER,
                   help=f"hub id, folder, .gguf file, a bundled name (bundled, bundled-agent, bundled-gemma, the pair "
                   f"bundled-hetero) or a vLLM server's http://host:port/v1 (default: {DEFAULT_VERIFIER})")
    p.add_argument("--drafter", default=AUTO,
                   help="same forms as --verifier; 'auto' (default): the drafter distilled from a bundled verifier "
                   "or a known hub verifier's small sibling (Qwen3, Llama 3, Gemma 3, SmolLM2), else an error; "
                   f"'{NO_DRAFTER}': no drafter (modes full and compressed only)")
    p.add_argument("--tokenizer", help="the pair's tokenizer when both models are on servers whose model folders "
                   "this machine cannot read")
    p.add_argument("--threads", type=int, help="torch's CPU threads (default: OMP_NUM_THREADS, else the cores the "
                   "machine's load leaves free)")


def drafter(args: argparse.Namespace) -> str | None:
    return None if args.drafter == NO_DRAFTER else args.drafter


def add_settings(p: argparse.ArgumentParser) -> None:
    """One flag per GenerationConfig field, with its help and default (`None`: the mode's default)."""
    for name, (kind, default, _, help_text) in setting_fields(exclude=("decisions",)).items():
        flag = "--" + name.replace("_", "-")
        base = next((t for t in get_args(kind) if t is not type(None)), kind)
        shown = "the mode's default" if default is None and name != "stop" else default
        if name == "seed":  # a flag cannot say None: a fresh seed per call is the API's alone
            help_text = "sampling seed"
        if name == "stop":
            p.add_argument(flag, action="append", default=None, help=f"{help_text} (repeatable)")
        elif base is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=f"{help_text} ({shown})")
        else:
            # a choice's help names the values: the usage line shows a short metavar
            p.add_argument(flag, type=base, default=None, choices=CHOICES.get(name), metavar=name.upper(),
                           help=f"{help_text} (default: {shown})")


def settings(args: argparse.Namespace) -> dict:
    """The GenerationConfig fields given on the command line."""
    return {name: getattr(args, name) for name in setting_fields() if getattr(args, name, None) is not None}

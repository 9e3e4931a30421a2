"""Experiment (not in the product): `asymspec bench bfcl` with the compressed tool view keeping, after each
signature's description sentence, the first sentence of each top-level argument's description:

    get_weather(city: str)  # Get the weather for a city. Args: city: City name.

    python experiments/agent-twins/args_view.py --items 0 --verifiers bundled-agent --systems asymspec \
        --choices auto --categories irrelevance --out runs/args-irrelevance
"""
import sys

import asymspec_agents.context.render as render
from asymspec_agents.context.tools import first_sentence, signature


def signature_with_arguments(spec, *, description: bool = True) -> str:
    text = signature(spec, description=description)
    if not description:  # a tools budget's fallback: bare signatures, as in the product
        return text
    properties = (spec.parameters.get("properties") or {}).items()
    described = [f"{name}: {first_sentence(sub['description']).rstrip('.')}" for name, sub in properties
                 if isinstance(sub, dict) and isinstance(sub.get("description"), str) and sub["description"].strip()]
    if not described:
        return text
    args = "Args: " + "; ".join(described) + "."
    return f"{text} {args}" if "  # " in text else f"{text}  # {args}"


render.signature = signature_with_arguments
from asymspec_agents.bench.bfcl import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

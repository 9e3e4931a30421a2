"""Same as `asymspec bench precision`; see asymspec_agents/bench/precision.py."""

import sys

from asymspec_agents.bench.precision import main

sys.exit(main())

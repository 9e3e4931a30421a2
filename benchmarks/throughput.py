"""Same as `asymspec bench throughput`; see asymspec_agents/bench/throughput.py."""

import sys

from asymspec_agents.bench.throughput import main

sys.exit(main())

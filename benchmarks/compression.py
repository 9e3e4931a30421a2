"""Compression benchmark (same as `asymspec bench compression`); see asymspec_agents/bench/compression.py."""
from asymspec_agents.bench.compression import main
raise SystemExit(main())

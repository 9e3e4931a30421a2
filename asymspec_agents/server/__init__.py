"""The OpenAI-compatible HTTP server (`asymspec serve`); needs the `serve` extra (FastAPI, uvicorn)."""

"""The REST gateway: FastAPI app, admission control, long-poll (see docs/api.md)."""

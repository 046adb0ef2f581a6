"""A fake Kubernetes API server for tests: HTTPS on 127.0.0.1, driven by the unchanged official client.

See server.FakeKubeApi (the entry point), fixtures.py (pytest fixtures) and objects.py (seed builders).
"""

"""socket.js and live.js, run under Node against a fake DOM and htmx (tests/frontend/live_js_harness.js).
Skipped without node."""

import shutil
import subprocess
from pathlib import Path

import pytest

NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_live_js_applies_events_reconnects_and_asks_htmx_to_refresh():
    harness = Path(__file__).with_name("live_js_harness.js")
    result = subprocess.run([NODE, str(harness)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "live.js ok" in result.stdout

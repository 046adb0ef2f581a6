"""The Docker image, built without Docker (no engine runs here): the Dockerfile's build context (the
repository less .dockerignore), the wheel its build stage makes of it, installed into a clean virtual
environment beside exactly the files its final stage copies from the context; then the image's own
build step (collectstatic) and `check --deploy` under production settings, run from that directory so
nothing is imported from the source tree. A package pyproject.toml does not ship fails here."""

import fnmatch
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.integration.processes import ROOT

pytestmark = pytest.mark.integration


def stages() -> list[list[list[str]]]:
    """The Dockerfile's stages, each a list of instructions (continuation lines joined, split in words)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    result: list[list[list[str]]] = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0].upper() == "FROM":
            result.append([])
        result[-1].append(words)
    return result


def ignored(relative: str, patterns: list[str]) -> bool:
    """.dockerignore's patterns, as this repository writes them: a path, or **/name at any depth."""
    parts = relative.split("/")
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatch("/".join(parts[: n + 1]), pattern) for n in range(len(parts))):
            return True
    return False


def build_context(target: Path) -> Path:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def skip(folder: str, names: list[str]) -> set[str]:
        base = Path(folder).relative_to(ROOT).as_posix()
        return {name for name in names if ignored(f"{base}/{name}".removeprefix("./"), patterns)}

    shutil.copytree(ROOT, target, ignore=skip)
    return target


def run(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 300) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{shlex.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def test_the_image_installs_collects_static_and_passes_check_deploy(tmp_path):
    build, final = stages()
    # The build stage makes the wheel of the whole context; the final stage takes it and named files.
    assert ["COPY", ".", "."] in build
    assert any(words[:3] == ["RUN", "pip", "wheel"] for words in build)
    copied = [words[1:-1] for words in final if words[0] == "COPY" and not words[1].startswith("--from")]
    sources = [source for sources in copied for source in sources]
    assert sources == ["manage.py"]

    context = build_context(tmp_path / "context")
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), "."], context)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", *map(str, wheels.glob("*.whl"))], tmp_path, timeout=600)
    app = tmp_path / "app"
    app.mkdir()
    for source in sources:
        shutil.copy(context / source, app / source)

    data = tmp_path / "data"
    data.mkdir()
    # Only the clean environment's own packages: nothing from this checkout or this test run's venv.
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "NVKE_DATA_DIR": str(data),
        "PYTHONUNBUFFERED": "1",
    }
    run([python, "manage.py", "collectstatic", "--noinput", "-v0"], app, env)
    assert (data / "static" / "frontend" / "app.css").exists()
    assert (data / "static" / "admin").is_dir()
    commands = run([python, "manage.py", "help", "--commands"], app, env)
    assert {"seed_catalog", "kube_sync", "simulate_telemetry", "migrate"} <= set(commands.split())
    production = {
        **env,
        "NVKE_SECRET_KEY": "i" * 64 + "-production-secret-not-for-real-use",
        "NVKE_ALLOWED_HOSTS": "nvke.example.com",
        "NVKE_SECURE": "1",
        "NVKE_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "DATABASE_URL": "postgres://nvke:secret@127.0.0.1:5432/nvke",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
    }
    out = run([python, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], app, production)
    assert "no issues" in out
    # What ran came from the clean install, not from the repository.
    where = run([python, "-c", "import telemetry, nvke; print(telemetry.__file__, nvke.__file__)"], app, env)
    assert str(venv) in where and str(ROOT) not in where and sys.prefix not in where

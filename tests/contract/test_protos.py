"""The contract: buf lint is clean and regenerating every stub changes nothing."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import REPO


def buf() -> str:
    path = REPO / "node_modules" / ".bin" / "buf"
    assert path.exists(), "buf is missing: run `npm ci` (make test does)"
    return str(path)


def test_buf_lint_is_clean() -> None:
    result = subprocess.run([buf(), "lint"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _tree(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}


def test_regenerating_code_is_a_no_op(tmp_path: Path) -> None:
    """`buf generate` in a copy of the repo's inputs reproduces the committed output exactly."""
    for name in ("buf.yaml", "buf.gen.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    for folder in ("protos", "tools", "sdk_stubs/tools"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    # The TypeScript plugin (ts-proto) is an npm package installed beside the stubs.
    (tmp_path / "sdk_stubs/typescript").mkdir(parents=True, exist_ok=True)
    (tmp_path / "sdk_stubs/typescript/node_modules").symlink_to(
        REPO / "sdk_stubs/typescript/node_modules"
    )
    config = yaml.safe_load((REPO / "buf.gen.yaml").read_text())
    outs = sorted({p["out"] for p in config["plugins"]})
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([buf(), "generate"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for out in outs:
        fresh, committed = _tree(tmp_path / out), _tree(REPO / out)
        generated = set(fresh)
        # Hand-written files may sit beside generated ones (e.g. a package.json).
        committed_generated = {k for k in committed if k in generated or _looks_generated(k)}
        assert generated == committed_generated, f"{out}: files differ"
        changed = [k for k in generated if not filecmp.cmp(fresh[k], committed[k], shallow=False)]
        assert not changed, f"{out}: regenerating changes {changed}"


def _looks_generated(rel: str) -> bool:
    return rel.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi", ".pb.go"))

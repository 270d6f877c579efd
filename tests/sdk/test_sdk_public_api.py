"""The SDK's public surface: exports, typing, dependencies, and the command line."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.resources
import inspect
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.message import Message

import swarmrl
from swarmrl import _cli
from swarmrl.testing import FakeSwarmServer


def test_all_is_sorted_and_complete() -> None:
    # As in httpx's tests/test_exported_members.py: every public name is exported, in order.
    public = {
        name
        for name, value in vars(swarmrl).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert swarmrl.__all__ == sorted(swarmrl.__all__)
    assert set(swarmrl.__all__) == public | {"__version__"}
    assert len(swarmrl.__all__) == len(set(swarmrl.__all__))


def _annotations(obj: Any) -> Iterator[tuple[str, Any]]:
    """Every resolved annotation of a public class (fields, methods, properties) or function."""
    if inspect.isclass(obj):
        yield from ((f"{obj.__name__}.{k}", v) for k, v in typing.get_type_hints(obj).items())
        for name, member in inspect.getmembers(obj):
            if name.startswith("_") and name not in ("__init__", "__aenter__", "__enter__"):
                continue
            function = member.fget if isinstance(member, property) else member
            if callable(function) and not inspect.isclass(function):
                hints = typing.get_type_hints(function)
                yield from ((f"{obj.__name__}.{name}.{k}", v) for k, v in hints.items())
    elif inspect.isfunction(obj):
        yield from ((f"{obj.__name__}.{k}", v) for k, v in typing.get_type_hints(obj).items())
    elif not isinstance(obj, str):  # a type alias such as Event
        yield (repr(obj), obj)


def _parts(annotation: Any) -> Iterator[Any]:
    """An annotation and everything nested in it (``list[X] | None`` gives list, X, None...)."""
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _parts(arg)
    origin = typing.get_origin(annotation)
    if origin is not None:
        yield from _parts(origin)


def _is_generated(part: Any) -> bool:
    # Our generated messages report their proto package as module ("swarmrl.v1.*_pb2").
    # google.protobuf's Message base (SwarmError.details holds google.rpc details) is fine.
    module = getattr(part, "__module__", "") or ""
    ours = module.startswith("swarmrl") and ("_pb2" in module or module.startswith("swarmrl_proto"))
    return ours or (isinstance(part, type) and issubclass(part, Message) and part is not Message)


def test_no_generated_types_in_public_signatures() -> None:
    checked = 0
    for name in swarmrl.__all__:
        for where, annotation in _annotations(getattr(swarmrl, name)):
            checked += 1
            leaked = [part for part in _parts(annotation) if _is_generated(part)]
            assert not leaked, f"{where} exposes {annotation}"
    assert checked > 100


def test_config_fields_are_documented() -> None:
    # Each field has a docstring under it; dataclasses don't keep those, so read the source.
    for cls in (swarmrl.ClientConfig, swarmrl.RetryPolicy, swarmrl.TLSConfig, swarmrl.Completion):
        source = inspect.getsource(cls)
        for field in dataclasses.fields(cls):
            after = source.split(f"    {field.name}:", 1)[1].split("\n", 2)
            assert after[1].strip().startswith('"""'), f"{cls.__name__}.{field.name}"
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cls.__new__(cls), dataclasses.fields(cls)[0].name, None)


def test_py_typed_is_shipped() -> None:
    assert (importlib.resources.files("swarmrl") / "py.typed").is_file()


def test_importing_the_sdk_does_not_import_torch() -> None:
    code = (
        "import sys, swarmrl, swarmrl.testing, swarmrl._cli\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy', 'swarmrl_server') "
        "if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_shortcuts() -> None:
    client = swarmrl.AsyncSwarmClient("h:1", api_key="k")
    assert (client.config.target, client.config.api_key) == ("h:1", "k")
    assert swarmrl.AsyncSwarmClient().config.target == "127.0.0.1:50051"
    assert "@" in client.config.client_name
    with pytest.raises(TypeError):
        swarmrl.AsyncSwarmClient("h:1", config=swarmrl.ClientConfig())
    with pytest.raises(ValueError):
        swarmrl.ClientConfig(session_lease=0)
    with pytest.raises(ValueError):
        swarmrl.TLSConfig(client_certificate=b"cert")


# -- the command line --------------------------------------------------------------------


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out and "status" in out


def test_cli_status(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeSwarmServer(models=("policy", "judge")).run_in_thread() as server:
        assert _cli.main(["status", "--target", server.target]) == 0
    out = capsys.readouterr().out
    assert server.instance in out
    assert "policy" in out and "judge" in out and "swarmrl.testing" in out


def test_cli_status_of_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli.main(["status", "--target", "127.0.0.1:1", "--wait", "0.2"]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_cli_serve_without_the_server_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "swarmrl_server.cli", None)  # import raises ImportError
    assert _cli.main(["serve", "--model", "tiny"]) == 2
    assert "pip install 'swarmrl[server]'" in capsys.readouterr().err


def test_cli_serve_delegates_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    fake_cli = types.ModuleType("swarmrl_server.cli")
    fake_cli.main = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "swarmrl_server.cli", fake_cli)
    assert _cli.main(["serve", "--model", "tiny", "--help"]) == 0
    assert seen == [["--model", "tiny", "--help"]]


def test_server_commands_come_from_entry_points() -> None:
    """The SDK names the server's commands, never its package: the distribution's entry
    points (pyproject.toml) map each name to the server code that runs it."""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=_cli.COMMAND_GROUP)}
    assert set(_cli._SERVER_COMMANDS) <= set(found), sorted(found)
    for name in _cli._SERVER_COMMANDS:
        assert found[name].module.startswith("swarmrl_server."), found[name]
        assert callable(found[name].load()), name

"""`swarmrl train` / `swarmrl eval` options checked before anything runs: the client's
session lease, the run folder's holder id."""

from __future__ import annotations

import pytest

from swarmrl.envs._cli import DEFAULT_LEASE_S, _parser


@pytest.mark.parametrize("command", ["train", "eval"])
def test_the_session_lease_is_an_option_within_the_servers_range(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    budget = ["--groups", "1"] if command == "train" else []
    args = _parser(command).parse_args(["m:E", *budget])
    assert args.lease == DEFAULT_LEASE_S == 60.0
    assert _parser(command).parse_args(["m:E", *budget, "--lease", "5"]).lease == 5.0
    for bad in ("0", "601", "soon"):
        with pytest.raises(SystemExit):
            _parser(command).parse_args(["m:E", *budget, "--lease", bad])
        assert "--lease" in capsys.readouterr().err

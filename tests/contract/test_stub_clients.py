"""The generated TypeScript, Go and Java stubs, each driving real episodes through a server crash.

Each language's example client (examples/clients/<language>/) is built from the committed
stubs in sdk_stubs/ and run against a `swarmrl serve` subprocess on the tiny model. The
test SIGKILLs the server once the client has ended its first episode and restarts it on
the same port and data directory; the client must ride through on the service config
alone (wait-for-ready + retry of UNAVAILABLE, sdk_stubs/service_config.json) and end
every episode, and the server must hold each episode's exact completion ids.

Toolchains come from scripts/install_stub_toolchains.sh. Without them these tests skip,
unless SWARMRL_REQUIRE_STUB_TOOLCHAINS=1 (CI) makes a missing toolchain a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from filelock import FileLock

from swarmrl_proto.v1 import admin_service_pb2, session_service_pb2
from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import types_pb2 as t_pb
from tests.helpers import REPO, ServerProcess, free_port, need, run_dir, wait_until

pytestmark = pytest.mark.slow

LANGUAGES = ("typescript", "go", "java")
SERVICE_CONFIG = REPO / "sdk_stubs" / "service_config.json"
ENDED = re.compile(r"^episode ended episode_id=(\S+) state=(\S+) call_id=(\S+) completion_ids=([\d,]*)$")


def run(cmd: list[str], cwd: Path = REPO, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, check=False, cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def build_typescript(out: Path) -> list[str]:
    stubs, example = REPO / "sdk_stubs/typescript", REPO / "examples/clients/typescript"
    need((stubs / "node_modules/.bin/tsc").exists() and (example / "node_modules").exists()
         and shutil.which("node") is not None, "node and the npm trees")
    run(["npm", "run", "--silent", "build"], cwd=stubs)  # type-checks the generated code
    run(["npm", "run", "--silent", "build"], cwd=example)  # into its dist/, next to node_modules
    return ["node", str(example / "dist/episodes.js")]


def build_go(out: Path) -> list[str]:
    need(shutil.which("go") is not None and Path("/usr/share/gocode/src/google.golang.org/grpc").exists(),
         "go and Debian's grpc-go")
    # GOPATH mode (Debian ships Go libraries as source under /usr/share/gocode): the
    # stubs' import path github.com/swarmrl/swarmrl/... resolves to this checkout.
    gopath = out / "gopath"
    (gopath / "src/github.com/swarmrl").mkdir(parents=True)
    (gopath / "src/github.com/swarmrl/swarmrl").symlink_to(REPO)
    run(["go", "vet", "./examples/clients/go"], env=go_env(gopath))
    run(["go", "build", "-o", str(out / "episodes"), "./examples/clients/go"], env=go_env(gopath))
    return [str(out / "episodes"), "-service-config", str(SERVICE_CONFIG), "-target"]


def go_env(gopath: Path) -> dict[str, str]:
    return {"GO111MODULE": "off", "GOFLAGS": "", "GOPATH": f"{gopath}:/usr/share/gocode",
            "GRPC_GO_RETRY": "on"}


def build_java(out: Path) -> list[str]:
    need(shutil.which("javac") is not None and Path("/usr/share/java/grpc-core.jar").exists(),
         "javac and Debian's grpc-java")
    classpath = subprocess.run([str(REPO / "sdk_stubs/java/classpath.sh")], capture_output=True,
                               text=True, check=True).stdout.strip()
    sources = sorted(str(p) for p in (REPO / "sdk_stubs/java/gen").rglob("*.java"))
    run(["javac", "-Xlint:all", "-Xlint:-processing", "-Werror", "-d", str(out), "-cp", classpath,
         *sources, str(REPO / "examples/clients/java/Episodes.java")])
    run([str(REPO / "sdk_stubs/java/tls-native.sh"), str(out / "jni")])  # TLS via OpenSSL
    return ["java", f"-Djava.library.path={out / 'jni'}", "-cp", f"{out}:{classpath}", "Episodes"]


BUILDERS = {"typescript": build_typescript, "go": build_go, "java": build_java}


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """Where the clients are built: one directory for the whole run, shared by the xdist
    workers, so each language is built once whichever worker needs it first. A toolchain build is tens of seconds of CPU (grpc-go
    from source, javac over the stubs), and the TypeScript build writes into the checkout,
    which two workers must not do at once."""
    root = run_dir(tmp_path_factory, worker_id) / "stub-client-builds"
    root.mkdir(exist_ok=True)
    return root


def client_command(builds: Path, language: str, target: str, episodes: int) -> list[str]:
    out, command = builds / language, builds / f"{language}.json"
    with FileLock(builds / f"{language}.lock"):  # the other workers wait for the build
        if not command.exists():  # a failed build leaves none: the next test builds again
            out.mkdir(exist_ok=True)
            command.write_text(json.dumps(BUILDERS[language](out)))
    cmd = json.loads(command.read_text())
    if language == "go":
        return [*cmd, target, "-episodes", str(episodes)]
    if language == "java":
        return [*cmd, target, str(episodes), str(SERVICE_CONFIG)]
    return [*cmd, target, str(episodes)]


@dataclass
class Client:
    """An example client in a subprocess, its output collected line by line."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, cmd: list[str], env: dict[str, str] | None = None) -> Client:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**os.environ, "GRPC_GO_RETRY": "on", **(env or {})})
        client = cls(proc)
        client.reader = threading.Thread(target=client._read, daemon=True)
        client.reader.start()
        return client

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def ended(self) -> list[re.Match[str]]:
        return [m for m in map(ENDED.match, list(self.lines)) if m]

    def wait(self, timeout: float) -> int:
        """The exit status, once the output is read to its end: the process can exit
        before the reader thread has taken its last lines from the pipe."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("client timed out:\n" + "\n".join(self.lines)) from None
        assert self.reader is not None
        self.reader.join(timeout=30)  # EOF comes with the exit: the client has no children
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def assert_recorded(target: str, ended: list[re.Match[str]],
                    credentials: grpc.ChannelCredentials | None = None,
                    metadata: tuple[tuple[str, str], ...] = ()) -> None:
    """Each ended episode is stored as ended, with the client's call and its exact ids."""
    with (grpc.secure_channel(target, credentials) if credentials
          else grpc.insecure_channel(target)) as channel:
        stub = ep_grpc.EpisodeServiceStub(channel)
        for m in ended:
            episode_id, state, call_id, ids = m.groups()
            assert state == "EPISODE_STATE_ENDED"
            episode = stub.GetEpisode(ep_pb.GetEpisodeRequest(episode_id=episode_id, include_calls=True),
                                      wait_for_ready=True, timeout=60, metadata=metadata).episode
            assert episode.state == t_pb.EPISODE_STATE_ENDED
            calls = {c.call_id: c for c in episode.calls}
            assert call_id in calls, f"{episode_id}: call {call_id} not recorded"
            assert calls[call_id].completion_ids, f"{episode_id}: no completion ids recorded"
            assert list(calls[call_id].completion_ids) == [int(i) for i in ids.split(",")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("stub-clients") / "data",
                           cache_dir=model_cache, port=free_port())
    server.start(timeout=300)
    yield server
    server.stop()


@pytest.mark.parametrize("language", LANGUAGES)
def test_example_client_survives_server_restart(
    language: str, server: ServerProcess, builds: Path,
) -> None:
    episodes = 3
    cmd = client_command(builds, language, server.target, episodes)
    if server.proc is None or server.proc.poll() is not None:
        server.start(timeout=300)  # an earlier test left it down
    client = Client.start(cmd)

    wait_until(lambda: bool(client.ended()) or client.proc.poll() is not None, 120,
               f"the {language} client's first episode")
    assert client.proc.poll() is None, f"client exited early:\n{client.output}"
    server.kill()
    ended_before_crash = len(client.ended())
    # A fresh log, so start() waits for the new process's "serving" line, not the old one's.
    server.log_path.rename(server.log_path.with_name(f"{server.log_path.stem}-before-{language}-crash.log"))
    server.start(timeout=300)

    assert client.wait(timeout=240) == 0, client.output
    ended = client.ended()
    assert len(ended) == episodes, client.output
    assert ended_before_crash < episodes, "the crash must come while the client is running"
    assert len({m.group(1) for m in ended}) == episodes
    assert_recorded(server.target, ended)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[tuple[ServerProcess, Path]]:
    need(shutil.which("openssl") is not None, "openssl")
    tmp = tmp_path_factory.mktemp("stub-clients-tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
    server = ServerProcess(data_dir=tmp / "data", cache_dir=model_cache, extra=[
        "--tls-cert", str(cert), "--tls-key", str(key), "--client-key", "client-secret"])
    server.start(timeout=300)
    yield server, cert
    server.stop()


@pytest.mark.parametrize("language", LANGUAGES)
def test_example_client_connects_with_tls_and_api_key(
    language: str, tls_server: tuple[ServerProcess, Path], builds: Path,
) -> None:
    server, cert = tls_server
    cmd = client_command(builds, language, server.target, 1)
    env = {"SWARMRL_TLS_CA": str(cert)}

    denied = Client.start(cmd, {**env, "SWARMRL_API_KEY": "wrong-key"})
    assert denied.wait(timeout=120) == 1, denied.output
    assert "unauthenticated" in denied.output.lower()

    client = Client.start(cmd, {**env, "SWARMRL_API_KEY": "client-secret"})
    assert client.wait(timeout=120) == 0, client.output
    assert len(client.ended()) == 1, client.output
    assert_recorded(server.target, client.ended(), grpc.ssl_channel_credentials(cert.read_bytes()),
                    metadata=(("authorization", "Bearer client-secret"),))


def method_names() -> dict[str, int]:
    """Every RPC of the protos, `package.Service/Method` -> its idempotency level."""
    names = {}
    for module in (admin_service_pb2, session_service_pb2, ep_pb):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                names[f"{service.full_name}/{method.name}"] = method.GetOptions().idempotency_level
    return names


def test_service_config_retries_only_safe_calls() -> None:
    config = json.loads(SERVICE_CONFIG.read_text())
    methods = method_names()
    listed = []
    for method_config in config["methodConfig"]:
        assert method_config["waitForReady"] is True
        policy = method_config["retryPolicy"]
        assert 2 <= policy["maxAttempts"] <= 5  # gRPC caps attempts at 5
        assert policy["retryableStatusCodes"] == ["UNAVAILABLE"]
        listed += [f"{n['service']}/{n['method']}" for n in method_config["name"]]
    assert len(listed) == len(set(listed))
    assert set(listed) <= set(methods), set(listed) - set(methods)
    for name in listed:
        # Generate is safe to retry only because every example sends a request_id.
        assert methods[name] != 0 or name == "swarmrl.v1.EpisodeService/Generate", name
    # The sessions and episodes an agent needs are all covered.
    for name, level in methods.items():
        if not name.startswith("swarmrl.v1.AdminService/") and level != 0:
            assert name in listed, name

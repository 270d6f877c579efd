"""TLS on both doors with the same flags: the official openai client and a gRPC
channel verify the server against a self-signed certificate for 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import Any

import grpc
import httpx
import openai
import pytest

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_server.security import IN_PROCESS
from tests.server_fixtures import ServerFactory


def self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return cert_path, key_path


async def test_shim_and_grpc_speak_tls_with_the_same_flags(
        make_server: ServerFactory, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    running: Any = await make_server(http=True, tls_cert=cert, tls_key=key)
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    async with grpc.aio.secure_channel(running.grpc_target, creds) as channel:
        await s_grpc.SessionServiceStub(channel).OpenSession(
            s_pb.OpenSessionRequest(session_id="tls", client_name="t"))
        ep = await ep_grpc.EpisodeServiceStub(channel).StartEpisode(
            ep_pb.StartEpisodeRequest(session_id="tls", task_id="t"))
    assert ep.openai_base_url.startswith("https://127.0.0.1:")
    client = openai.AsyncOpenAI(
        base_url=ep.openai_base_url, api_key=ep.openai_api_key, max_retries=0,
        http_client=httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cert))))
    r = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert r.choices[0].message is not None
    assert (await running.swarm.episodes.get(ep.episode_id, caller=IN_PROCESS)).num_calls == 1
    # Without trusting the certificate the client refuses; plain HTTP gets no answer.
    untrusting = openai.AsyncOpenAI(base_url=ep.openai_base_url,
                                    api_key=ep.openai_api_key, max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        await untrusting.models.list()
    plain = openai.AsyncOpenAI(base_url=ep.openai_base_url.replace("https:", "http:"),
                               api_key=ep.openai_api_key, max_retries=0)
    with pytest.raises((openai.APIConnectionError, openai.APIStatusError)):
        await plain.models.list()

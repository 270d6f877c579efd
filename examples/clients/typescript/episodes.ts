// Runs N episodes against a swarm server with the generated Node stubs only:
// open a session, start an episode, stream a generation, reward it, end it.
//
//   node dist/episodes.js [TARGET] [EPISODES]      (default 127.0.0.1:50051, 1)
//   SWARMRL_API_KEY=...    sends `authorization: Bearer <key>`
//   SWARMRL_TLS_CA=ca.pem  connects with TLS, trusting that certificate
//
// Reconnecting is the service config's job (sdk_stubs/service_config.json): calls
// wait while the server is down and UNAVAILABLE is retried with the same request.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import {
  EpisodeServiceClient, EndEpisodeRequest, EndEpisodeResponse, GenerateRequest, GenerateResponse,
  GenerateResult, OpenSessionRequest, OpenSessionResponse, Role, SessionServiceClient,
  StartEpisodeRequest, StartEpisodeResponse, SubmitRewardRequest, SubmitRewardResponse,
  episodeStateToJSON, grpc, serviceConfig,
} from "@swarmrl/stubs";

const [target = "127.0.0.1:50051", episodesArg = "1"] = process.argv.slice(2);
const credentials = process.env.SWARMRL_TLS_CA
  ? grpc.credentials.createSsl(readFileSync(process.env.SWARMRL_TLS_CA))
  : grpc.credentials.createInsecure();
const options = { "grpc.service_config": JSON.stringify(serviceConfig) };
const sessions = new SessionServiceClient(target, credentials, options);
const episodes = new EpisodeServiceClient(target, credentials, options);

// grpc-js reads waitForReady from call metadata, not from the service config.
function md(): grpc.Metadata {
  const metadata = new grpc.Metadata({ waitForReady: true });
  if (process.env.SWARMRL_API_KEY) metadata.set("authorization", `Bearer ${process.env.SWARMRL_API_KEY}`);
  return metadata;
}

type Callback<T> = (err: grpc.ServiceError | null, response: T) => void;
function call<T>(start: (done: Callback<T>) => unknown): Promise<T> {
  return new Promise((resolve, reject) => start((err, res) => (err ? reject(err) : resolve(res))));
}

// A stream cut after its first message is not retried by gRPC; re-issuing it with
// the same request_id is safe: the server replays a call it already finished.
async function generate(request: GenerateRequest): Promise<GenerateResult> {
  for (let attempt = 1; ; attempt++) {
    try {
      let result: GenerateResult | undefined;
      for await (const event of episodes.generate(request, md()) as AsyncIterable<GenerateResponse>) {
        result = event.result ?? result;
      }
      if (!result) throw new Error("Generate stream ended without a result");
      return result;
    } catch (err) {
      if ((err as grpc.ServiceError).code !== grpc.status.UNAVAILABLE || attempt >= 5) throw err;
      console.log(`generate interrupted (${(err as Error).message}); re-issuing ${request.requestId}`);
    }
  }
}

async function main(): Promise<void> {
  const sessionId = randomUUID();
  const lease = { seconds: 120, nanos: 0 };
  const opened = await call<OpenSessionResponse>((done) =>
    sessions.openSession(OpenSessionRequest.fromPartial({
      sessionId, clientName: "example-typescript", agentVersion: "example-typescript", lease,
    }), md(), done));
  console.log(`session opened session_id=${sessionId} server_instance=${opened.serverInstance}`);

  for (let i = 0; i < Number(episodesArg); i++) {
    const start = StartEpisodeRequest.fromPartial({
      sessionId, taskId: `hello-${i}`, agentVersion: "example-typescript", requestId: randomUUID(),
    });
    const { episodeId } = await call<StartEpisodeResponse>((done) => episodes.startEpisode(start, md(), done));

    const result = await generate(GenerateRequest.fromPartial({
      episodeId, requestId: randomUUID(), sampling: { maxTokens: 16 },
      chat: { messages: [{ role: Role.ROLE_USER, content: `Say hello #${i}.` }] },
    }));
    const reward = result.completionIds.length > 0 ? 1.0 : 0.0;
    await call<SubmitRewardResponse>((done) =>
      episodes.submitReward(SubmitRewardRequest.fromPartial({
        episodeId, value: reward, requestId: randomUUID(),
      }), md(), done));
    const ended = await call<EndEpisodeResponse>((done) =>
      episodes.endEpisode(EndEpisodeRequest.fromPartial({ episodeId, requestId: randomUUID() }), md(), done));
    const state = episodeStateToJSON(ended.episode?.state ?? 0);
    console.log(`episode ended episode_id=${episodeId} state=${state} call_id=${result.callId} ` +
      `completion_ids=${result.completionIds.join(",")}`);
  }
  await call((done) => sessions.closeSession({ sessionId }, md(), done));
}

main().then(
  () => process.exit(0),
  (err: grpc.ServiceError) => {
    console.error(`error: ${grpc.status[err.code] ?? "?"} (${err.code}): ${err.details ?? err.message}`);
    process.exit(1);
  },
);

// Runs N episodes against a swarm server with the generated Java stubs only:
// open a session, start an episode, stream a generation, reward it, end it.
//
//   java -cp "build:$(sdk_stubs/java/classpath.sh)" Episodes [TARGET] [EPISODES] [SERVICE_CONFIG]
//   SWARMRL_API_KEY=...    sends `authorization: Bearer <key>`
//   SWARMRL_TLS_CA=ca.pem  connects with TLS, trusting that certificate
//
// Reconnecting is the service config's job (sdk_stubs/service_config.json): calls
// wait while the server is down and UNAVAILABLE is retried with the same request.

import com.google.gson.Gson;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptors;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.MetadataUtils;
import io.swarmrl.v1.*;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.Map;
import java.util.UUID;
import java.util.stream.Collectors;

public final class Episodes {
  /**
   * Streams one call. A stream cut after its first message is not retried by gRPC;
   * re-issuing it with the same request_id is safe: the server replays a call it already finished.
   */
  static GenerateResult generate(EpisodeServiceGrpc.EpisodeServiceBlockingStub client, GenerateRequest request) {
    for (int attempt = 1; ; attempt++) {
      try {
        GenerateResult result = null;
        for (Iterator<GenerateResponse> it = client.generate(request); it.hasNext(); ) {
          GenerateResponse event = it.next();
          if (event.hasResult()) result = event.getResult();
        }
        if (result == null) throw Status.INTERNAL.withDescription("Generate stream ended without a result").asRuntimeException();
        return result;
      } catch (StatusRuntimeException e) {
        if (e.getStatus().getCode() != Status.Code.UNAVAILABLE || attempt >= 5) throw e;
        Status s = e.getStatus();
        System.out.println("generate interrupted (" + s.getCode() + ": " + s.getDescription() + "); re-issuing "
            + request.getRequestId());
      }
    }
  }

  static void run(Channel channel, int episodes) {
    var sessions = SessionServiceGrpc.newBlockingStub(channel);
    var client = EpisodeServiceGrpc.newBlockingStub(channel);
    String sessionId = UUID.randomUUID().toString();
    OpenSessionResponse opened = sessions.openSession(OpenSessionRequest.newBuilder()
        .setSessionId(sessionId).setClientName("example-java")
        .setLease(com.google.protobuf.Duration.newBuilder().setSeconds(120)).build());
    System.out.println("session opened session_id=" + sessionId + " server_instance=" + opened.getServerInstance());

    for (int i = 0; i < episodes; i++) {
      StartEpisodeResponse started = client.startEpisode(StartEpisodeRequest.newBuilder()
          .setSessionId(sessionId).setTaskId("hello-" + i).setAgentVersion("example-java")
          .setRequestId(UUID.randomUUID().toString()).build());
      String episodeId = started.getEpisodeId();
      GenerateResult result = generate(client, GenerateRequest.newBuilder()
          .setEpisodeId(episodeId).setRequestId(UUID.randomUUID().toString())
          .setChat(ChatInput.newBuilder().addMessages(
              ChatMessage.newBuilder().setRole(Role.ROLE_USER).setContent("Say hello #" + i + ".")))
          .setSampling(SamplingParams.newBuilder().setMaxTokens(16)).build());
      double reward = result.getCompletionIdsCount() > 0 ? 1.0 : 0.0;
      client.submitReward(SubmitRewardRequest.newBuilder()
          .setEpisodeId(episodeId).setValue(reward).setRequestId(UUID.randomUUID().toString()).build());
      EndEpisodeResponse ended = client.endEpisode(EndEpisodeRequest.newBuilder()
          .setEpisodeId(episodeId).setRequestId(UUID.randomUUID().toString()).build());
      String ids = result.getCompletionIdsList().stream().map(String::valueOf).collect(Collectors.joining(","));
      System.out.println("episode ended episode_id=" + episodeId + " state=" + ended.getEpisode().getState()
          + " call_id=" + result.getCallId() + " completion_ids=" + ids);
    }
    sessions.closeSession(CloseSessionRequest.newBuilder().setSessionId(sessionId).build());
  }

  public static void main(String[] args) throws Exception {
    String target = args.length > 0 ? args[0] : "127.0.0.1:50051";
    int episodes = args.length > 1 ? Integer.parseInt(args[1]) : 1;
    String configPath = args.length > 2 ? args[2] : "sdk_stubs/service_config.json";
    Map<?, ?> serviceConfig = new Gson().fromJson(Files.readString(Path.of(configPath)), Map.class);
    String ca = System.getenv("SWARMRL_TLS_CA");
    ChannelCredentials credentials = ca == null ? InsecureChannelCredentials.create()
        : TlsChannelCredentials.newBuilder().trustManager(new File(ca)).build();
    @SuppressWarnings("unchecked")
    ManagedChannel managed = Grpc.newChannelBuilder(target, credentials)
        .defaultServiceConfig((Map<String, ?>) serviceConfig).enableRetry().build();
    Channel channel = managed;
    String key = System.getenv("SWARMRL_API_KEY");
    if (key != null && !key.isEmpty()) {
      Metadata headers = new Metadata();
      headers.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + key);
      channel = ClientInterceptors.intercept(managed, MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    int exit = 0;
    try {
      run(channel, episodes);
    } catch (StatusRuntimeException e) {
      Status s = e.getStatus();
      System.err.println("error: " + s.getCode() + " (" + s.getCode().value() + "): " + s.getDescription());
      exit = 1;
    } finally {
      managed.shutdownNow();
    }
    System.exit(exit);
  }
}

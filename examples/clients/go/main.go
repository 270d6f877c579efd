// Command episodes runs N episodes against a swarm server with the generated Go
// stubs only: open a session, start an episode, stream a generation, reward it,
// end it.
//
//	GRPC_GO_RETRY=on episodes [-target 127.0.0.1:50051] [-episodes 1] [-service-config PATH]
//	SWARMRL_API_KEY=...    sends `authorization: Bearer <key>`
//	SWARMRL_TLS_CA=ca.pem  connects with TLS, trusting that certificate
//
// Reconnecting is the service config's job (sdk_stubs/service_config.json): calls
// wait while the server is down and UNAVAILABLE is retried with the same request.
// Older grpc-go, such as Debian 12's 1.33, retries only with GRPC_GO_RETRY=on.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	pb "github.com/swarmrl/swarmrl/sdk_stubs/go/gen/swarmrl/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// generate streams one call. A stream cut after its first message is not retried by
// gRPC; re-issuing it with the same request_id is safe: the server replays a call it
// already finished.
func generate(ctx context.Context, client pb.EpisodeServiceClient, req *pb.GenerateRequest) (*pb.GenerateResult, error) {
	for attempt := 1; ; attempt++ {
		var result *pb.GenerateResult
		stream, err := client.Generate(ctx, req)
		for err == nil {
			var event *pb.GenerateResponse
			if event, err = stream.Recv(); event.GetResult() != nil {
				result = event.GetResult()
			}
		}
		if err == io.EOF && result != nil {
			return result, nil
		} else if err == io.EOF {
			return nil, status.Error(codes.Internal, "Generate stream ended without a result")
		} else if status.Code(err) != codes.Unavailable || attempt == 5 {
			return nil, err
		}
		fmt.Printf("generate interrupted (%v); re-issuing %s\n", err, req.RequestId)
	}
}

func run(target, serviceConfigPath string, episodes int) error {
	creds := grpc.WithInsecure()
	if ca := os.Getenv("SWARMRL_TLS_CA"); ca != "" {
		tls, err := credentials.NewClientTLSFromFile(ca, "")
		if err != nil {
			return err
		}
		creds = grpc.WithTransportCredentials(tls)
	}
	serviceConfig, err := os.ReadFile(serviceConfigPath)
	if err != nil {
		return err
	}
	conn, err := grpc.Dial(target, creds, grpc.WithDefaultServiceConfig(string(serviceConfig)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx := context.Background()
	if key := os.Getenv("SWARMRL_API_KEY"); key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	}
	sessions, client := pb.NewSessionServiceClient(conn), pb.NewEpisodeServiceClient(conn)

	sessionID := newID()
	opened, err := sessions.OpenSession(ctx, &pb.OpenSessionRequest{
		SessionId: sessionID, ClientName: "example-go", Lease: durationpb.New(120e9)})
	if err != nil {
		return err
	}
	fmt.Printf("session opened session_id=%s server_instance=%s\n", sessionID, opened.ServerInstance)

	for i := 0; i < episodes; i++ {
		started, err := client.StartEpisode(ctx, &pb.StartEpisodeRequest{
			SessionId: sessionID, TaskId: fmt.Sprintf("hello-%d", i), AgentVersion: "example-go", RequestId: newID()})
		if err != nil {
			return err
		}
		episodeID, maxTokens := started.EpisodeId, int32(16)
		result, err := generate(ctx, client, &pb.GenerateRequest{
			EpisodeId: episodeID, RequestId: newID(), Sampling: &pb.SamplingParams{MaxTokens: &maxTokens},
			Input: &pb.GenerateRequest_Chat{Chat: &pb.ChatInput{Messages: []*pb.ChatMessage{
				{Role: pb.Role_ROLE_USER, Content: fmt.Sprintf("Say hello #%d.", i)}}}},
		})
		if err != nil {
			return err
		}
		reward := 0.0
		if len(result.CompletionIds) > 0 {
			reward = 1.0
		}
		if _, err := client.SubmitReward(ctx, &pb.SubmitRewardRequest{
			EpisodeId: episodeID, Value: reward, RequestId: newID()}); err != nil {
			return err
		}
		ended, err := client.EndEpisode(ctx, &pb.EndEpisodeRequest{EpisodeId: episodeID, RequestId: newID()})
		if err != nil {
			return err
		}
		ids := strings.Trim(strings.ReplaceAll(fmt.Sprint(result.CompletionIds), " ", ","), "[]")
		fmt.Printf("episode ended episode_id=%s state=%s call_id=%s completion_ids=%s\n",
			episodeID, ended.Episode.GetState(), result.CallId, ids)
	}
	_, err = sessions.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: sessionID})
	return err
}

func main() {
	target := flag.String("target", "127.0.0.1:50051", "server address")
	episodes := flag.Int("episodes", 1, "episodes to run")
	serviceConfig := flag.String("service-config", "sdk_stubs/service_config.json", "gRPC service config")
	flag.Parse()
	if !strings.EqualFold(os.Getenv("GRPC_GO_RETRY"), "on") {
		fmt.Fprintf(os.Stderr, "note: older grpc-go (this is %s) retries only with GRPC_GO_RETRY=on\n", grpc.Version)
	}
	if err := run(*target, *serviceConfig, *episodes); err != nil {
		fmt.Fprintf(os.Stderr, "error: %s (%d): %s\n", status.Code(err), status.Code(err), status.Convert(err).Message())
		os.Exit(1)
	}
}

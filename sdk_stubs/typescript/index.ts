// The package's entry point: every generated message and client, the gRPC
// library they were generated for, and the service config that makes calls
// wait for the server and retry UNAVAILABLE (see ../README.md).
import * as grpc from "@grpc/grpc-js";
import serviceConfig from "./service_config.json";

export * from "./gen/swarmrl/v1/types";
export * from "./gen/swarmrl/v1/session_service";
export * from "./gen/swarmrl/v1/episode_service";
export * from "./gen/swarmrl/v1/admin_service";
export { Duration } from "./gen/google/protobuf/duration";
export { Timestamp } from "./gen/google/protobuf/timestamp";
export { grpc, serviceConfig };

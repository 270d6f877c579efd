package io.swarmrl.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * AdminService reports on and steers the server. When the server has API
 * keys configured, these calls need an admin key (except GetStatus and
 * ListModels, which any key may call).
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: swarmrl/v1/admin_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class AdminServiceGrpc {

  private AdminServiceGrpc() {}

  public static final String SERVICE_NAME = "swarmrl.v1.AdminService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.GetStatusRequest,
      io.swarmrl.v1.GetStatusResponse> getGetStatusMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetStatus",
      requestType = io.swarmrl.v1.GetStatusRequest.class,
      responseType = io.swarmrl.v1.GetStatusResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.GetStatusRequest,
      io.swarmrl.v1.GetStatusResponse> getGetStatusMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.GetStatusRequest, io.swarmrl.v1.GetStatusResponse> getGetStatusMethod;
    if ((getGetStatusMethod = AdminServiceGrpc.getGetStatusMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getGetStatusMethod = AdminServiceGrpc.getGetStatusMethod) == null) {
          AdminServiceGrpc.getGetStatusMethod = getGetStatusMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.GetStatusRequest, io.swarmrl.v1.GetStatusResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetStatus"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GetStatusRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GetStatusResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("GetStatus"))
              .build();
        }
      }
    }
    return getGetStatusMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.ListModelsRequest,
      io.swarmrl.v1.ListModelsResponse> getListModelsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListModels",
      requestType = io.swarmrl.v1.ListModelsRequest.class,
      responseType = io.swarmrl.v1.ListModelsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.ListModelsRequest,
      io.swarmrl.v1.ListModelsResponse> getListModelsMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.ListModelsRequest, io.swarmrl.v1.ListModelsResponse> getListModelsMethod;
    if ((getListModelsMethod = AdminServiceGrpc.getListModelsMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getListModelsMethod = AdminServiceGrpc.getListModelsMethod) == null) {
          AdminServiceGrpc.getListModelsMethod = getListModelsMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.ListModelsRequest, io.swarmrl.v1.ListModelsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListModels"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ListModelsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ListModelsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ListModels"))
              .build();
        }
      }
    }
    return getListModelsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.PauseGenerationRequest,
      io.swarmrl.v1.PauseGenerationResponse> getPauseGenerationMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "PauseGeneration",
      requestType = io.swarmrl.v1.PauseGenerationRequest.class,
      responseType = io.swarmrl.v1.PauseGenerationResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.PauseGenerationRequest,
      io.swarmrl.v1.PauseGenerationResponse> getPauseGenerationMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.PauseGenerationRequest, io.swarmrl.v1.PauseGenerationResponse> getPauseGenerationMethod;
    if ((getPauseGenerationMethod = AdminServiceGrpc.getPauseGenerationMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getPauseGenerationMethod = AdminServiceGrpc.getPauseGenerationMethod) == null) {
          AdminServiceGrpc.getPauseGenerationMethod = getPauseGenerationMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.PauseGenerationRequest, io.swarmrl.v1.PauseGenerationResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "PauseGeneration"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.PauseGenerationRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.PauseGenerationResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("PauseGeneration"))
              .build();
        }
      }
    }
    return getPauseGenerationMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.ResumeGenerationRequest,
      io.swarmrl.v1.ResumeGenerationResponse> getResumeGenerationMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ResumeGeneration",
      requestType = io.swarmrl.v1.ResumeGenerationRequest.class,
      responseType = io.swarmrl.v1.ResumeGenerationResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.ResumeGenerationRequest,
      io.swarmrl.v1.ResumeGenerationResponse> getResumeGenerationMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.ResumeGenerationRequest, io.swarmrl.v1.ResumeGenerationResponse> getResumeGenerationMethod;
    if ((getResumeGenerationMethod = AdminServiceGrpc.getResumeGenerationMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getResumeGenerationMethod = AdminServiceGrpc.getResumeGenerationMethod) == null) {
          AdminServiceGrpc.getResumeGenerationMethod = getResumeGenerationMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.ResumeGenerationRequest, io.swarmrl.v1.ResumeGenerationResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ResumeGeneration"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ResumeGenerationRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ResumeGenerationResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ResumeGeneration"))
              .build();
        }
      }
    }
    return getResumeGenerationMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.SaveCheckpointRequest,
      io.swarmrl.v1.SaveCheckpointResponse> getSaveCheckpointMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SaveCheckpoint",
      requestType = io.swarmrl.v1.SaveCheckpointRequest.class,
      responseType = io.swarmrl.v1.SaveCheckpointResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.SaveCheckpointRequest,
      io.swarmrl.v1.SaveCheckpointResponse> getSaveCheckpointMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.SaveCheckpointRequest, io.swarmrl.v1.SaveCheckpointResponse> getSaveCheckpointMethod;
    if ((getSaveCheckpointMethod = AdminServiceGrpc.getSaveCheckpointMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getSaveCheckpointMethod = AdminServiceGrpc.getSaveCheckpointMethod) == null) {
          AdminServiceGrpc.getSaveCheckpointMethod = getSaveCheckpointMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.SaveCheckpointRequest, io.swarmrl.v1.SaveCheckpointResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SaveCheckpoint"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.SaveCheckpointRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.SaveCheckpointResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("SaveCheckpoint"))
              .build();
        }
      }
    }
    return getSaveCheckpointMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.DeleteCheckpointRequest,
      io.swarmrl.v1.DeleteCheckpointResponse> getDeleteCheckpointMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeleteCheckpoint",
      requestType = io.swarmrl.v1.DeleteCheckpointRequest.class,
      responseType = io.swarmrl.v1.DeleteCheckpointResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.DeleteCheckpointRequest,
      io.swarmrl.v1.DeleteCheckpointResponse> getDeleteCheckpointMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.DeleteCheckpointRequest, io.swarmrl.v1.DeleteCheckpointResponse> getDeleteCheckpointMethod;
    if ((getDeleteCheckpointMethod = AdminServiceGrpc.getDeleteCheckpointMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getDeleteCheckpointMethod = AdminServiceGrpc.getDeleteCheckpointMethod) == null) {
          AdminServiceGrpc.getDeleteCheckpointMethod = getDeleteCheckpointMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.DeleteCheckpointRequest, io.swarmrl.v1.DeleteCheckpointResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeleteCheckpoint"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.DeleteCheckpointRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.DeleteCheckpointResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("DeleteCheckpoint"))
              .build();
        }
      }
    }
    return getDeleteCheckpointMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.HoldTrainingRequest,
      io.swarmrl.v1.HoldTrainingResponse> getHoldTrainingMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "HoldTraining",
      requestType = io.swarmrl.v1.HoldTrainingRequest.class,
      responseType = io.swarmrl.v1.HoldTrainingResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.HoldTrainingRequest,
      io.swarmrl.v1.HoldTrainingResponse> getHoldTrainingMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.HoldTrainingRequest, io.swarmrl.v1.HoldTrainingResponse> getHoldTrainingMethod;
    if ((getHoldTrainingMethod = AdminServiceGrpc.getHoldTrainingMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getHoldTrainingMethod = AdminServiceGrpc.getHoldTrainingMethod) == null) {
          AdminServiceGrpc.getHoldTrainingMethod = getHoldTrainingMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.HoldTrainingRequest, io.swarmrl.v1.HoldTrainingResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "HoldTraining"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.HoldTrainingRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.HoldTrainingResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("HoldTraining"))
              .build();
        }
      }
    }
    return getHoldTrainingMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.ReleaseTrainingRequest,
      io.swarmrl.v1.ReleaseTrainingResponse> getReleaseTrainingMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ReleaseTraining",
      requestType = io.swarmrl.v1.ReleaseTrainingRequest.class,
      responseType = io.swarmrl.v1.ReleaseTrainingResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.ReleaseTrainingRequest,
      io.swarmrl.v1.ReleaseTrainingResponse> getReleaseTrainingMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.ReleaseTrainingRequest, io.swarmrl.v1.ReleaseTrainingResponse> getReleaseTrainingMethod;
    if ((getReleaseTrainingMethod = AdminServiceGrpc.getReleaseTrainingMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getReleaseTrainingMethod = AdminServiceGrpc.getReleaseTrainingMethod) == null) {
          AdminServiceGrpc.getReleaseTrainingMethod = getReleaseTrainingMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.ReleaseTrainingRequest, io.swarmrl.v1.ReleaseTrainingResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ReleaseTraining"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ReleaseTrainingRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ReleaseTrainingResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ReleaseTraining"))
              .build();
        }
      }
    }
    return getReleaseTrainingMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.RestoreCheckpointRequest,
      io.swarmrl.v1.RestoreCheckpointResponse> getRestoreCheckpointMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "RestoreCheckpoint",
      requestType = io.swarmrl.v1.RestoreCheckpointRequest.class,
      responseType = io.swarmrl.v1.RestoreCheckpointResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.RestoreCheckpointRequest,
      io.swarmrl.v1.RestoreCheckpointResponse> getRestoreCheckpointMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.RestoreCheckpointRequest, io.swarmrl.v1.RestoreCheckpointResponse> getRestoreCheckpointMethod;
    if ((getRestoreCheckpointMethod = AdminServiceGrpc.getRestoreCheckpointMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getRestoreCheckpointMethod = AdminServiceGrpc.getRestoreCheckpointMethod) == null) {
          AdminServiceGrpc.getRestoreCheckpointMethod = getRestoreCheckpointMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.RestoreCheckpointRequest, io.swarmrl.v1.RestoreCheckpointResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "RestoreCheckpoint"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.RestoreCheckpointRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.RestoreCheckpointResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("RestoreCheckpoint"))
              .build();
        }
      }
    }
    return getRestoreCheckpointMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.ListClientsRequest,
      io.swarmrl.v1.ListClientsResponse> getListClientsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListClients",
      requestType = io.swarmrl.v1.ListClientsRequest.class,
      responseType = io.swarmrl.v1.ListClientsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.ListClientsRequest,
      io.swarmrl.v1.ListClientsResponse> getListClientsMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.ListClientsRequest, io.swarmrl.v1.ListClientsResponse> getListClientsMethod;
    if ((getListClientsMethod = AdminServiceGrpc.getListClientsMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getListClientsMethod = AdminServiceGrpc.getListClientsMethod) == null) {
          AdminServiceGrpc.getListClientsMethod = getListClientsMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.ListClientsRequest, io.swarmrl.v1.ListClientsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListClients"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ListClientsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.ListClientsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("ListClients"))
              .build();
        }
      }
    }
    return getListClientsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.GetLiveSnapshotRequest,
      io.swarmrl.v1.GetLiveSnapshotResponse> getGetLiveSnapshotMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetLiveSnapshot",
      requestType = io.swarmrl.v1.GetLiveSnapshotRequest.class,
      responseType = io.swarmrl.v1.GetLiveSnapshotResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.GetLiveSnapshotRequest,
      io.swarmrl.v1.GetLiveSnapshotResponse> getGetLiveSnapshotMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.GetLiveSnapshotRequest, io.swarmrl.v1.GetLiveSnapshotResponse> getGetLiveSnapshotMethod;
    if ((getGetLiveSnapshotMethod = AdminServiceGrpc.getGetLiveSnapshotMethod) == null) {
      synchronized (AdminServiceGrpc.class) {
        if ((getGetLiveSnapshotMethod = AdminServiceGrpc.getGetLiveSnapshotMethod) == null) {
          AdminServiceGrpc.getGetLiveSnapshotMethod = getGetLiveSnapshotMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.GetLiveSnapshotRequest, io.swarmrl.v1.GetLiveSnapshotResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetLiveSnapshot"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GetLiveSnapshotRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GetLiveSnapshotResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminServiceMethodDescriptorSupplier("GetLiveSnapshot"))
              .build();
        }
      }
    }
    return getGetLiveSnapshotMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static AdminServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminServiceStub>() {
        @java.lang.Override
        public AdminServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminServiceStub(channel, callOptions);
        }
      };
    return AdminServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static AdminServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminServiceBlockingStub>() {
        @java.lang.Override
        public AdminServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminServiceBlockingStub(channel, callOptions);
        }
      };
    return AdminServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static AdminServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminServiceFutureStub>() {
        @java.lang.Override
        public AdminServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminServiceFutureStub(channel, callOptions);
        }
      };
    return AdminServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * AdminService reports on and steers the server. When the server has API
   * keys configured, these calls need an admin key (except GetStatus and
   * ListModels, which any key may call).
   * </pre>
   */
  public static abstract class AdminServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Reports the server's state.
     * </pre>
     */
    public void getStatus(io.swarmrl.v1.GetStatusRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GetStatusResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetStatusMethod(), responseObserver);
    }

    /**
     * <pre>
     * Lists the models the server hosts.
     * </pre>
     */
    public void listModels(io.swarmrl.v1.ListModelsRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ListModelsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListModelsMethod(), responseObserver);
    }

    /**
     * <pre>
     * Pauses generation: new calls wait (gRPC: UNAVAILABLE with a retry delay).
     * </pre>
     */
    public void pauseGeneration(io.swarmrl.v1.PauseGenerationRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.PauseGenerationResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPauseGenerationMethod(), responseObserver);
    }

    /**
     * <pre>
     * Resumes generation after PauseGeneration.
     * </pre>
     */
    public void resumeGeneration(io.swarmrl.v1.ResumeGenerationRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ResumeGenerationResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getResumeGenerationMethod(), responseObserver);
    }

    /**
     * <pre>
     * Writes a checkpoint of a model now. A checkpoint written on request is kept
     * outside the automatic retention (the trainer's keep_checkpoints): it stays
     * until DeleteCheckpoint removes it, across restarts too.
     * </pre>
     */
    public void saveCheckpoint(io.swarmrl.v1.SaveCheckpointRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.SaveCheckpointResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSaveCheckpointMethod(), responseObserver);
    }

    /**
     * <pre>
     * Removes one checkpoint of a model (a SaveCheckpoint path). Refused for a path
     * outside the model's checkpoints (INVALID_ARGUMENT), a checkpoint that is not
     * there (NOT_FOUND), and the model's newest checkpoint, the one a restarted
     * server resumes from (FAILED_PRECONDITION). Needs an admin key.
     * </pre>
     */
    public void deleteCheckpoint(io.swarmrl.v1.DeleteCheckpointRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.DeleteCheckpointResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeleteCheckpointMethod(), responseObserver);
    }

    /**
     * <pre>
     * Holds a model's training: no optimizer step starts until the holder calls
     * ReleaseTraining or the hold lapses. A step in progress finishes, and its
     * weights are served, before this returns; generation goes on at the returned
     * policy version, so an evaluation played while the hold lasts plays that one
     * version. A hold is a lease: it lasts as long as the holder's session (or, held
     * without a session, for a TTL that holding again renews); when it lapses,
     * training goes on. Holding again by the same holder never takes a second hold:
     * it re-binds the first to the new session or lease. Holds live in the server's
     * memory: a restarted server holds nothing.
     * </pre>
     */
    public void holdTraining(io.swarmrl.v1.HoldTrainingRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.HoldTrainingResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getHoldTrainingMethod(), responseObserver);
    }

    /**
     * <pre>
     * Lifts one holder's hold of a model's training.
     * </pre>
     */
    public void releaseTraining(io.swarmrl.v1.ReleaseTrainingRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ReleaseTrainingResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReleaseTrainingMethod(), responseObserver);
    }

    /**
     * <pre>
     * Loads a checkpoint's weights into a model's trainer and serves them as a
     * new policy version (the best checkpoint by validation, before a test).
     * </pre>
     */
    public void restoreCheckpoint(io.swarmrl.v1.RestoreCheckpointRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.RestoreCheckpointResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRestoreCheckpointMethod(), responseObserver);
    }

    /**
     * <pre>
     * Lists the clients attached now (sessions with a live lease) with their
     * tasks, models, agent versions and episode counts, and the episode counts
     * of every agent version the server has seen. Needs an admin key.
     * </pre>
     */
    public void listClients(io.swarmrl.v1.ListClientsRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ListClientsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListClientsMethod(), responseObserver);
    }

    /**
     * <pre>
     * What the server is doing now, for `swarmrl top`: trainer progress per task,
     * open episodes and their idle time, call and token totals, recent errors. Read
     * from memory, so polling it every second costs next to nothing; lists are
     * capped, counts are not. The HTTP shim serves the same message as JSON at
     * GET /swarmrl/live. Needs an admin key.
     * </pre>
     */
    public void getLiveSnapshot(io.swarmrl.v1.GetLiveSnapshotRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GetLiveSnapshotResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetLiveSnapshotMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getGetStatusMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.GetStatusRequest,
                io.swarmrl.v1.GetStatusResponse>(
                  this, METHODID_GET_STATUS)))
          .addMethod(
            getListModelsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.ListModelsRequest,
                io.swarmrl.v1.ListModelsResponse>(
                  this, METHODID_LIST_MODELS)))
          .addMethod(
            getPauseGenerationMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.PauseGenerationRequest,
                io.swarmrl.v1.PauseGenerationResponse>(
                  this, METHODID_PAUSE_GENERATION)))
          .addMethod(
            getResumeGenerationMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.ResumeGenerationRequest,
                io.swarmrl.v1.ResumeGenerationResponse>(
                  this, METHODID_RESUME_GENERATION)))
          .addMethod(
            getSaveCheckpointMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.SaveCheckpointRequest,
                io.swarmrl.v1.SaveCheckpointResponse>(
                  this, METHODID_SAVE_CHECKPOINT)))
          .addMethod(
            getDeleteCheckpointMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.DeleteCheckpointRequest,
                io.swarmrl.v1.DeleteCheckpointResponse>(
                  this, METHODID_DELETE_CHECKPOINT)))
          .addMethod(
            getHoldTrainingMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.HoldTrainingRequest,
                io.swarmrl.v1.HoldTrainingResponse>(
                  this, METHODID_HOLD_TRAINING)))
          .addMethod(
            getReleaseTrainingMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.ReleaseTrainingRequest,
                io.swarmrl.v1.ReleaseTrainingResponse>(
                  this, METHODID_RELEASE_TRAINING)))
          .addMethod(
            getRestoreCheckpointMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.RestoreCheckpointRequest,
                io.swarmrl.v1.RestoreCheckpointResponse>(
                  this, METHODID_RESTORE_CHECKPOINT)))
          .addMethod(
            getListClientsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.ListClientsRequest,
                io.swarmrl.v1.ListClientsResponse>(
                  this, METHODID_LIST_CLIENTS)))
          .addMethod(
            getGetLiveSnapshotMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.GetLiveSnapshotRequest,
                io.swarmrl.v1.GetLiveSnapshotResponse>(
                  this, METHODID_GET_LIVE_SNAPSHOT)))
          .build();
    }
  }

  /**
   * <pre>
   * AdminService reports on and steers the server. When the server has API
   * keys configured, these calls need an admin key (except GetStatus and
   * ListModels, which any key may call).
   * </pre>
   */
  public static final class AdminServiceStub extends io.grpc.stub.AbstractAsyncStub<AdminServiceStub> {
    private AdminServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Reports the server's state.
     * </pre>
     */
    public void getStatus(io.swarmrl.v1.GetStatusRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GetStatusResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetStatusMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Lists the models the server hosts.
     * </pre>
     */
    public void listModels(io.swarmrl.v1.ListModelsRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ListModelsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListModelsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Pauses generation: new calls wait (gRPC: UNAVAILABLE with a retry delay).
     * </pre>
     */
    public void pauseGeneration(io.swarmrl.v1.PauseGenerationRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.PauseGenerationResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPauseGenerationMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Resumes generation after PauseGeneration.
     * </pre>
     */
    public void resumeGeneration(io.swarmrl.v1.ResumeGenerationRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ResumeGenerationResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getResumeGenerationMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Writes a checkpoint of a model now. A checkpoint written on request is kept
     * outside the automatic retention (the trainer's keep_checkpoints): it stays
     * until DeleteCheckpoint removes it, across restarts too.
     * </pre>
     */
    public void saveCheckpoint(io.swarmrl.v1.SaveCheckpointRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.SaveCheckpointResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSaveCheckpointMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Removes one checkpoint of a model (a SaveCheckpoint path). Refused for a path
     * outside the model's checkpoints (INVALID_ARGUMENT), a checkpoint that is not
     * there (NOT_FOUND), and the model's newest checkpoint, the one a restarted
     * server resumes from (FAILED_PRECONDITION). Needs an admin key.
     * </pre>
     */
    public void deleteCheckpoint(io.swarmrl.v1.DeleteCheckpointRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.DeleteCheckpointResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeleteCheckpointMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Holds a model's training: no optimizer step starts until the holder calls
     * ReleaseTraining or the hold lapses. A step in progress finishes, and its
     * weights are served, before this returns; generation goes on at the returned
     * policy version, so an evaluation played while the hold lasts plays that one
     * version. A hold is a lease: it lasts as long as the holder's session (or, held
     * without a session, for a TTL that holding again renews); when it lapses,
     * training goes on. Holding again by the same holder never takes a second hold:
     * it re-binds the first to the new session or lease. Holds live in the server's
     * memory: a restarted server holds nothing.
     * </pre>
     */
    public void holdTraining(io.swarmrl.v1.HoldTrainingRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.HoldTrainingResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getHoldTrainingMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Lifts one holder's hold of a model's training.
     * </pre>
     */
    public void releaseTraining(io.swarmrl.v1.ReleaseTrainingRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ReleaseTrainingResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReleaseTrainingMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Loads a checkpoint's weights into a model's trainer and serves them as a
     * new policy version (the best checkpoint by validation, before a test).
     * </pre>
     */
    public void restoreCheckpoint(io.swarmrl.v1.RestoreCheckpointRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.RestoreCheckpointResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRestoreCheckpointMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Lists the clients attached now (sessions with a live lease) with their
     * tasks, models, agent versions and episode counts, and the episode counts
     * of every agent version the server has seen. Needs an admin key.
     * </pre>
     */
    public void listClients(io.swarmrl.v1.ListClientsRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.ListClientsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListClientsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * What the server is doing now, for `swarmrl top`: trainer progress per task,
     * open episodes and their idle time, call and token totals, recent errors. Read
     * from memory, so polling it every second costs next to nothing; lists are
     * capped, counts are not. The HTTP shim serves the same message as JSON at
     * GET /swarmrl/live. Needs an admin key.
     * </pre>
     */
    public void getLiveSnapshot(io.swarmrl.v1.GetLiveSnapshotRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GetLiveSnapshotResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetLiveSnapshotMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * AdminService reports on and steers the server. When the server has API
   * keys configured, these calls need an admin key (except GetStatus and
   * ListModels, which any key may call).
   * </pre>
   */
  public static final class AdminServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<AdminServiceBlockingStub> {
    private AdminServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Reports the server's state.
     * </pre>
     */
    public io.swarmrl.v1.GetStatusResponse getStatus(io.swarmrl.v1.GetStatusRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetStatusMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Lists the models the server hosts.
     * </pre>
     */
    public io.swarmrl.v1.ListModelsResponse listModels(io.swarmrl.v1.ListModelsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListModelsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Pauses generation: new calls wait (gRPC: UNAVAILABLE with a retry delay).
     * </pre>
     */
    public io.swarmrl.v1.PauseGenerationResponse pauseGeneration(io.swarmrl.v1.PauseGenerationRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPauseGenerationMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Resumes generation after PauseGeneration.
     * </pre>
     */
    public io.swarmrl.v1.ResumeGenerationResponse resumeGeneration(io.swarmrl.v1.ResumeGenerationRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getResumeGenerationMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Writes a checkpoint of a model now. A checkpoint written on request is kept
     * outside the automatic retention (the trainer's keep_checkpoints): it stays
     * until DeleteCheckpoint removes it, across restarts too.
     * </pre>
     */
    public io.swarmrl.v1.SaveCheckpointResponse saveCheckpoint(io.swarmrl.v1.SaveCheckpointRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSaveCheckpointMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Removes one checkpoint of a model (a SaveCheckpoint path). Refused for a path
     * outside the model's checkpoints (INVALID_ARGUMENT), a checkpoint that is not
     * there (NOT_FOUND), and the model's newest checkpoint, the one a restarted
     * server resumes from (FAILED_PRECONDITION). Needs an admin key.
     * </pre>
     */
    public io.swarmrl.v1.DeleteCheckpointResponse deleteCheckpoint(io.swarmrl.v1.DeleteCheckpointRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeleteCheckpointMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Holds a model's training: no optimizer step starts until the holder calls
     * ReleaseTraining or the hold lapses. A step in progress finishes, and its
     * weights are served, before this returns; generation goes on at the returned
     * policy version, so an evaluation played while the hold lasts plays that one
     * version. A hold is a lease: it lasts as long as the holder's session (or, held
     * without a session, for a TTL that holding again renews); when it lapses,
     * training goes on. Holding again by the same holder never takes a second hold:
     * it re-binds the first to the new session or lease. Holds live in the server's
     * memory: a restarted server holds nothing.
     * </pre>
     */
    public io.swarmrl.v1.HoldTrainingResponse holdTraining(io.swarmrl.v1.HoldTrainingRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getHoldTrainingMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Lifts one holder's hold of a model's training.
     * </pre>
     */
    public io.swarmrl.v1.ReleaseTrainingResponse releaseTraining(io.swarmrl.v1.ReleaseTrainingRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReleaseTrainingMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Loads a checkpoint's weights into a model's trainer and serves them as a
     * new policy version (the best checkpoint by validation, before a test).
     * </pre>
     */
    public io.swarmrl.v1.RestoreCheckpointResponse restoreCheckpoint(io.swarmrl.v1.RestoreCheckpointRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRestoreCheckpointMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Lists the clients attached now (sessions with a live lease) with their
     * tasks, models, agent versions and episode counts, and the episode counts
     * of every agent version the server has seen. Needs an admin key.
     * </pre>
     */
    public io.swarmrl.v1.ListClientsResponse listClients(io.swarmrl.v1.ListClientsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListClientsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * What the server is doing now, for `swarmrl top`: trainer progress per task,
     * open episodes and their idle time, call and token totals, recent errors. Read
     * from memory, so polling it every second costs next to nothing; lists are
     * capped, counts are not. The HTTP shim serves the same message as JSON at
     * GET /swarmrl/live. Needs an admin key.
     * </pre>
     */
    public io.swarmrl.v1.GetLiveSnapshotResponse getLiveSnapshot(io.swarmrl.v1.GetLiveSnapshotRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetLiveSnapshotMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * AdminService reports on and steers the server. When the server has API
   * keys configured, these calls need an admin key (except GetStatus and
   * ListModels, which any key may call).
   * </pre>
   */
  public static final class AdminServiceFutureStub extends io.grpc.stub.AbstractFutureStub<AdminServiceFutureStub> {
    private AdminServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Reports the server's state.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.GetStatusResponse> getStatus(
        io.swarmrl.v1.GetStatusRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetStatusMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Lists the models the server hosts.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.ListModelsResponse> listModels(
        io.swarmrl.v1.ListModelsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListModelsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Pauses generation: new calls wait (gRPC: UNAVAILABLE with a retry delay).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.PauseGenerationResponse> pauseGeneration(
        io.swarmrl.v1.PauseGenerationRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPauseGenerationMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Resumes generation after PauseGeneration.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.ResumeGenerationResponse> resumeGeneration(
        io.swarmrl.v1.ResumeGenerationRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getResumeGenerationMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Writes a checkpoint of a model now. A checkpoint written on request is kept
     * outside the automatic retention (the trainer's keep_checkpoints): it stays
     * until DeleteCheckpoint removes it, across restarts too.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.SaveCheckpointResponse> saveCheckpoint(
        io.swarmrl.v1.SaveCheckpointRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSaveCheckpointMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Removes one checkpoint of a model (a SaveCheckpoint path). Refused for a path
     * outside the model's checkpoints (INVALID_ARGUMENT), a checkpoint that is not
     * there (NOT_FOUND), and the model's newest checkpoint, the one a restarted
     * server resumes from (FAILED_PRECONDITION). Needs an admin key.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.DeleteCheckpointResponse> deleteCheckpoint(
        io.swarmrl.v1.DeleteCheckpointRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeleteCheckpointMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Holds a model's training: no optimizer step starts until the holder calls
     * ReleaseTraining or the hold lapses. A step in progress finishes, and its
     * weights are served, before this returns; generation goes on at the returned
     * policy version, so an evaluation played while the hold lasts plays that one
     * version. A hold is a lease: it lasts as long as the holder's session (or, held
     * without a session, for a TTL that holding again renews); when it lapses,
     * training goes on. Holding again by the same holder never takes a second hold:
     * it re-binds the first to the new session or lease. Holds live in the server's
     * memory: a restarted server holds nothing.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.HoldTrainingResponse> holdTraining(
        io.swarmrl.v1.HoldTrainingRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getHoldTrainingMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Lifts one holder's hold of a model's training.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.ReleaseTrainingResponse> releaseTraining(
        io.swarmrl.v1.ReleaseTrainingRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReleaseTrainingMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Loads a checkpoint's weights into a model's trainer and serves them as a
     * new policy version (the best checkpoint by validation, before a test).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.RestoreCheckpointResponse> restoreCheckpoint(
        io.swarmrl.v1.RestoreCheckpointRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRestoreCheckpointMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Lists the clients attached now (sessions with a live lease) with their
     * tasks, models, agent versions and episode counts, and the episode counts
     * of every agent version the server has seen. Needs an admin key.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.ListClientsResponse> listClients(
        io.swarmrl.v1.ListClientsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListClientsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * What the server is doing now, for `swarmrl top`: trainer progress per task,
     * open episodes and their idle time, call and token totals, recent errors. Read
     * from memory, so polling it every second costs next to nothing; lists are
     * capped, counts are not. The HTTP shim serves the same message as JSON at
     * GET /swarmrl/live. Needs an admin key.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.GetLiveSnapshotResponse> getLiveSnapshot(
        io.swarmrl.v1.GetLiveSnapshotRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetLiveSnapshotMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_GET_STATUS = 0;
  private static final int METHODID_LIST_MODELS = 1;
  private static final int METHODID_PAUSE_GENERATION = 2;
  private static final int METHODID_RESUME_GENERATION = 3;
  private static final int METHODID_SAVE_CHECKPOINT = 4;
  private static final int METHODID_DELETE_CHECKPOINT = 5;
  private static final int METHODID_HOLD_TRAINING = 6;
  private static final int METHODID_RELEASE_TRAINING = 7;
  private static final int METHODID_RESTORE_CHECKPOINT = 8;
  private static final int METHODID_LIST_CLIENTS = 9;
  private static final int METHODID_GET_LIVE_SNAPSHOT = 10;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AdminServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(AdminServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_GET_STATUS:
          serviceImpl.getStatus((io.swarmrl.v1.GetStatusRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.GetStatusResponse>) responseObserver);
          break;
        case METHODID_LIST_MODELS:
          serviceImpl.listModels((io.swarmrl.v1.ListModelsRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.ListModelsResponse>) responseObserver);
          break;
        case METHODID_PAUSE_GENERATION:
          serviceImpl.pauseGeneration((io.swarmrl.v1.PauseGenerationRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.PauseGenerationResponse>) responseObserver);
          break;
        case METHODID_RESUME_GENERATION:
          serviceImpl.resumeGeneration((io.swarmrl.v1.ResumeGenerationRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.ResumeGenerationResponse>) responseObserver);
          break;
        case METHODID_SAVE_CHECKPOINT:
          serviceImpl.saveCheckpoint((io.swarmrl.v1.SaveCheckpointRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.SaveCheckpointResponse>) responseObserver);
          break;
        case METHODID_DELETE_CHECKPOINT:
          serviceImpl.deleteCheckpoint((io.swarmrl.v1.DeleteCheckpointRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.DeleteCheckpointResponse>) responseObserver);
          break;
        case METHODID_HOLD_TRAINING:
          serviceImpl.holdTraining((io.swarmrl.v1.HoldTrainingRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.HoldTrainingResponse>) responseObserver);
          break;
        case METHODID_RELEASE_TRAINING:
          serviceImpl.releaseTraining((io.swarmrl.v1.ReleaseTrainingRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.ReleaseTrainingResponse>) responseObserver);
          break;
        case METHODID_RESTORE_CHECKPOINT:
          serviceImpl.restoreCheckpoint((io.swarmrl.v1.RestoreCheckpointRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.RestoreCheckpointResponse>) responseObserver);
          break;
        case METHODID_LIST_CLIENTS:
          serviceImpl.listClients((io.swarmrl.v1.ListClientsRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.ListClientsResponse>) responseObserver);
          break;
        case METHODID_GET_LIVE_SNAPSHOT:
          serviceImpl.getLiveSnapshot((io.swarmrl.v1.GetLiveSnapshotRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.GetLiveSnapshotResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class AdminServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    AdminServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.swarmrl.v1.AdminServiceProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("AdminService");
    }
  }

  private static final class AdminServiceFileDescriptorSupplier
      extends AdminServiceBaseDescriptorSupplier {
    AdminServiceFileDescriptorSupplier() {}
  }

  private static final class AdminServiceMethodDescriptorSupplier
      extends AdminServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    AdminServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (AdminServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new AdminServiceFileDescriptorSupplier())
              .addMethod(getGetStatusMethod())
              .addMethod(getListModelsMethod())
              .addMethod(getPauseGenerationMethod())
              .addMethod(getResumeGenerationMethod())
              .addMethod(getSaveCheckpointMethod())
              .addMethod(getDeleteCheckpointMethod())
              .addMethod(getHoldTrainingMethod())
              .addMethod(getReleaseTrainingMethod())
              .addMethod(getRestoreCheckpointMethod())
              .addMethod(getListClientsMethod())
              .addMethod(getGetLiveSnapshotMethod())
              .build();
        }
      }
    }
    return result;
  }
}

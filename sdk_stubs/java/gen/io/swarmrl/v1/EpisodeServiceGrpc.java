package io.swarmrl.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * EpisodeService runs episodes: a client starts one, generates with the
 * server's models (each call recorded with its exact token ids and logprobs),
 * reports rewards, and ends or aborts it. Mutating calls carry a client-made
 * request_id; a retried call with the same request_id is applied once and
 * answered with the first answer.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: swarmrl/v1/episode_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class EpisodeServiceGrpc {

  private EpisodeServiceGrpc() {}

  public static final String SERVICE_NAME = "swarmrl.v1.EpisodeService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.StartEpisodeRequest,
      io.swarmrl.v1.StartEpisodeResponse> getStartEpisodeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "StartEpisode",
      requestType = io.swarmrl.v1.StartEpisodeRequest.class,
      responseType = io.swarmrl.v1.StartEpisodeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.StartEpisodeRequest,
      io.swarmrl.v1.StartEpisodeResponse> getStartEpisodeMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.StartEpisodeRequest, io.swarmrl.v1.StartEpisodeResponse> getStartEpisodeMethod;
    if ((getStartEpisodeMethod = EpisodeServiceGrpc.getStartEpisodeMethod) == null) {
      synchronized (EpisodeServiceGrpc.class) {
        if ((getStartEpisodeMethod = EpisodeServiceGrpc.getStartEpisodeMethod) == null) {
          EpisodeServiceGrpc.getStartEpisodeMethod = getStartEpisodeMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.StartEpisodeRequest, io.swarmrl.v1.StartEpisodeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "StartEpisode"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.StartEpisodeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.StartEpisodeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new EpisodeServiceMethodDescriptorSupplier("StartEpisode"))
              .build();
        }
      }
    }
    return getStartEpisodeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.GenerateRequest,
      io.swarmrl.v1.GenerateResponse> getGenerateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Generate",
      requestType = io.swarmrl.v1.GenerateRequest.class,
      responseType = io.swarmrl.v1.GenerateResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.GenerateRequest,
      io.swarmrl.v1.GenerateResponse> getGenerateMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.GenerateRequest, io.swarmrl.v1.GenerateResponse> getGenerateMethod;
    if ((getGenerateMethod = EpisodeServiceGrpc.getGenerateMethod) == null) {
      synchronized (EpisodeServiceGrpc.class) {
        if ((getGenerateMethod = EpisodeServiceGrpc.getGenerateMethod) == null) {
          EpisodeServiceGrpc.getGenerateMethod = getGenerateMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.GenerateRequest, io.swarmrl.v1.GenerateResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Generate"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GenerateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GenerateResponse.getDefaultInstance()))
              .setSchemaDescriptor(new EpisodeServiceMethodDescriptorSupplier("Generate"))
              .build();
        }
      }
    }
    return getGenerateMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.SubmitRewardRequest,
      io.swarmrl.v1.SubmitRewardResponse> getSubmitRewardMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SubmitReward",
      requestType = io.swarmrl.v1.SubmitRewardRequest.class,
      responseType = io.swarmrl.v1.SubmitRewardResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.SubmitRewardRequest,
      io.swarmrl.v1.SubmitRewardResponse> getSubmitRewardMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.SubmitRewardRequest, io.swarmrl.v1.SubmitRewardResponse> getSubmitRewardMethod;
    if ((getSubmitRewardMethod = EpisodeServiceGrpc.getSubmitRewardMethod) == null) {
      synchronized (EpisodeServiceGrpc.class) {
        if ((getSubmitRewardMethod = EpisodeServiceGrpc.getSubmitRewardMethod) == null) {
          EpisodeServiceGrpc.getSubmitRewardMethod = getSubmitRewardMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.SubmitRewardRequest, io.swarmrl.v1.SubmitRewardResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SubmitReward"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.SubmitRewardRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.SubmitRewardResponse.getDefaultInstance()))
              .setSchemaDescriptor(new EpisodeServiceMethodDescriptorSupplier("SubmitReward"))
              .build();
        }
      }
    }
    return getSubmitRewardMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.EndEpisodeRequest,
      io.swarmrl.v1.EndEpisodeResponse> getEndEpisodeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "EndEpisode",
      requestType = io.swarmrl.v1.EndEpisodeRequest.class,
      responseType = io.swarmrl.v1.EndEpisodeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.EndEpisodeRequest,
      io.swarmrl.v1.EndEpisodeResponse> getEndEpisodeMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.EndEpisodeRequest, io.swarmrl.v1.EndEpisodeResponse> getEndEpisodeMethod;
    if ((getEndEpisodeMethod = EpisodeServiceGrpc.getEndEpisodeMethod) == null) {
      synchronized (EpisodeServiceGrpc.class) {
        if ((getEndEpisodeMethod = EpisodeServiceGrpc.getEndEpisodeMethod) == null) {
          EpisodeServiceGrpc.getEndEpisodeMethod = getEndEpisodeMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.EndEpisodeRequest, io.swarmrl.v1.EndEpisodeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "EndEpisode"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.EndEpisodeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.EndEpisodeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new EpisodeServiceMethodDescriptorSupplier("EndEpisode"))
              .build();
        }
      }
    }
    return getEndEpisodeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.AbortEpisodeRequest,
      io.swarmrl.v1.AbortEpisodeResponse> getAbortEpisodeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "AbortEpisode",
      requestType = io.swarmrl.v1.AbortEpisodeRequest.class,
      responseType = io.swarmrl.v1.AbortEpisodeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.AbortEpisodeRequest,
      io.swarmrl.v1.AbortEpisodeResponse> getAbortEpisodeMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.AbortEpisodeRequest, io.swarmrl.v1.AbortEpisodeResponse> getAbortEpisodeMethod;
    if ((getAbortEpisodeMethod = EpisodeServiceGrpc.getAbortEpisodeMethod) == null) {
      synchronized (EpisodeServiceGrpc.class) {
        if ((getAbortEpisodeMethod = EpisodeServiceGrpc.getAbortEpisodeMethod) == null) {
          EpisodeServiceGrpc.getAbortEpisodeMethod = getAbortEpisodeMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.AbortEpisodeRequest, io.swarmrl.v1.AbortEpisodeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "AbortEpisode"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.AbortEpisodeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.AbortEpisodeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new EpisodeServiceMethodDescriptorSupplier("AbortEpisode"))
              .build();
        }
      }
    }
    return getAbortEpisodeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.GetEpisodeRequest,
      io.swarmrl.v1.GetEpisodeResponse> getGetEpisodeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetEpisode",
      requestType = io.swarmrl.v1.GetEpisodeRequest.class,
      responseType = io.swarmrl.v1.GetEpisodeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.GetEpisodeRequest,
      io.swarmrl.v1.GetEpisodeResponse> getGetEpisodeMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.GetEpisodeRequest, io.swarmrl.v1.GetEpisodeResponse> getGetEpisodeMethod;
    if ((getGetEpisodeMethod = EpisodeServiceGrpc.getGetEpisodeMethod) == null) {
      synchronized (EpisodeServiceGrpc.class) {
        if ((getGetEpisodeMethod = EpisodeServiceGrpc.getGetEpisodeMethod) == null) {
          EpisodeServiceGrpc.getGetEpisodeMethod = getGetEpisodeMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.GetEpisodeRequest, io.swarmrl.v1.GetEpisodeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetEpisode"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GetEpisodeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.GetEpisodeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new EpisodeServiceMethodDescriptorSupplier("GetEpisode"))
              .build();
        }
      }
    }
    return getGetEpisodeMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static EpisodeServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<EpisodeServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<EpisodeServiceStub>() {
        @java.lang.Override
        public EpisodeServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new EpisodeServiceStub(channel, callOptions);
        }
      };
    return EpisodeServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static EpisodeServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<EpisodeServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<EpisodeServiceBlockingStub>() {
        @java.lang.Override
        public EpisodeServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new EpisodeServiceBlockingStub(channel, callOptions);
        }
      };
    return EpisodeServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static EpisodeServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<EpisodeServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<EpisodeServiceFutureStub>() {
        @java.lang.Override
        public EpisodeServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new EpisodeServiceFutureStub(channel, callOptions);
        }
      };
    return EpisodeServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * EpisodeService runs episodes: a client starts one, generates with the
   * server's models (each call recorded with its exact token ids and logprobs),
   * reports rewards, and ends or aborts it. Mutating calls carry a client-made
   * request_id; a retried call with the same request_id is applied once and
   * answered with the first answer.
   * </pre>
   */
  public static abstract class EpisodeServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Starts an episode. NOT_FOUND for an unknown model or session,
     * INVALID_ARGUMENT for a malformed request.
     * </pre>
     */
    public void startEpisode(io.swarmrl.v1.StartEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.StartEpisodeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getStartEpisodeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Generates a completion within an episode and streams it: chunks of token
     * ids with their logprobs and text, then one final result. NOT_FOUND for an
     * unknown episode or model, FAILED_PRECONDITION when the episode is not
     * open, INVALID_ARGUMENT (naming the field) for bad input,
     * UNAVAILABLE with a retry delay while generation is paused.
     * </pre>
     */
    public void generate(io.swarmrl.v1.GenerateRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GenerateResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGenerateMethod(), responseObserver);
    }

    /**
     * <pre>
     * Records a reward for the episode, for one of its models, or for one of
     * its calls. INVALID_ARGUMENT for a reward that is not finite or a model the
     * episode does not list, FAILED_PRECONDITION when the episode is not open.
     * </pre>
     */
    public void submitReward(io.swarmrl.v1.SubmitRewardRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.SubmitRewardResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSubmitRewardMethod(), responseObserver);
    }

    /**
     * <pre>
     * Ends an episode. Once this returns, the episode is durable and queued for
     * training by every model it lists, in one store transaction: a server
     * killed meanwhile leaves it queued for all of them or for none. FAILED_PRECONDITION when it was already ended or aborted
     * (unless the request_id repeats the call that ended it) or has no reward.
     * </pre>
     */
    public void endEpisode(io.swarmrl.v1.EndEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.EndEpisodeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getEndEpisodeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Aborts an episode: its calls are kept for inspection but never trained.
     * </pre>
     */
    public void abortEpisode(io.swarmrl.v1.AbortEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.AbortEpisodeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAbortEpisodeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Returns an episode and, on request, the calls recorded in it.
     * </pre>
     */
    public void getEpisode(io.swarmrl.v1.GetEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GetEpisodeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetEpisodeMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getStartEpisodeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.StartEpisodeRequest,
                io.swarmrl.v1.StartEpisodeResponse>(
                  this, METHODID_START_EPISODE)))
          .addMethod(
            getGenerateMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.swarmrl.v1.GenerateRequest,
                io.swarmrl.v1.GenerateResponse>(
                  this, METHODID_GENERATE)))
          .addMethod(
            getSubmitRewardMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.SubmitRewardRequest,
                io.swarmrl.v1.SubmitRewardResponse>(
                  this, METHODID_SUBMIT_REWARD)))
          .addMethod(
            getEndEpisodeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.EndEpisodeRequest,
                io.swarmrl.v1.EndEpisodeResponse>(
                  this, METHODID_END_EPISODE)))
          .addMethod(
            getAbortEpisodeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.AbortEpisodeRequest,
                io.swarmrl.v1.AbortEpisodeResponse>(
                  this, METHODID_ABORT_EPISODE)))
          .addMethod(
            getGetEpisodeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.GetEpisodeRequest,
                io.swarmrl.v1.GetEpisodeResponse>(
                  this, METHODID_GET_EPISODE)))
          .build();
    }
  }

  /**
   * <pre>
   * EpisodeService runs episodes: a client starts one, generates with the
   * server's models (each call recorded with its exact token ids and logprobs),
   * reports rewards, and ends or aborts it. Mutating calls carry a client-made
   * request_id; a retried call with the same request_id is applied once and
   * answered with the first answer.
   * </pre>
   */
  public static final class EpisodeServiceStub extends io.grpc.stub.AbstractAsyncStub<EpisodeServiceStub> {
    private EpisodeServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected EpisodeServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new EpisodeServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Starts an episode. NOT_FOUND for an unknown model or session,
     * INVALID_ARGUMENT for a malformed request.
     * </pre>
     */
    public void startEpisode(io.swarmrl.v1.StartEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.StartEpisodeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getStartEpisodeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Generates a completion within an episode and streams it: chunks of token
     * ids with their logprobs and text, then one final result. NOT_FOUND for an
     * unknown episode or model, FAILED_PRECONDITION when the episode is not
     * open, INVALID_ARGUMENT (naming the field) for bad input,
     * UNAVAILABLE with a retry delay while generation is paused.
     * </pre>
     */
    public void generate(io.swarmrl.v1.GenerateRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GenerateResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getGenerateMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Records a reward for the episode, for one of its models, or for one of
     * its calls. INVALID_ARGUMENT for a reward that is not finite or a model the
     * episode does not list, FAILED_PRECONDITION when the episode is not open.
     * </pre>
     */
    public void submitReward(io.swarmrl.v1.SubmitRewardRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.SubmitRewardResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSubmitRewardMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Ends an episode. Once this returns, the episode is durable and queued for
     * training by every model it lists, in one store transaction: a server
     * killed meanwhile leaves it queued for all of them or for none. FAILED_PRECONDITION when it was already ended or aborted
     * (unless the request_id repeats the call that ended it) or has no reward.
     * </pre>
     */
    public void endEpisode(io.swarmrl.v1.EndEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.EndEpisodeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getEndEpisodeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Aborts an episode: its calls are kept for inspection but never trained.
     * </pre>
     */
    public void abortEpisode(io.swarmrl.v1.AbortEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.AbortEpisodeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAbortEpisodeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Returns an episode and, on request, the calls recorded in it.
     * </pre>
     */
    public void getEpisode(io.swarmrl.v1.GetEpisodeRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.GetEpisodeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetEpisodeMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * EpisodeService runs episodes: a client starts one, generates with the
   * server's models (each call recorded with its exact token ids and logprobs),
   * reports rewards, and ends or aborts it. Mutating calls carry a client-made
   * request_id; a retried call with the same request_id is applied once and
   * answered with the first answer.
   * </pre>
   */
  public static final class EpisodeServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<EpisodeServiceBlockingStub> {
    private EpisodeServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected EpisodeServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new EpisodeServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Starts an episode. NOT_FOUND for an unknown model or session,
     * INVALID_ARGUMENT for a malformed request.
     * </pre>
     */
    public io.swarmrl.v1.StartEpisodeResponse startEpisode(io.swarmrl.v1.StartEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getStartEpisodeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Generates a completion within an episode and streams it: chunks of token
     * ids with their logprobs and text, then one final result. NOT_FOUND for an
     * unknown episode or model, FAILED_PRECONDITION when the episode is not
     * open, INVALID_ARGUMENT (naming the field) for bad input,
     * UNAVAILABLE with a retry delay while generation is paused.
     * </pre>
     */
    public java.util.Iterator<io.swarmrl.v1.GenerateResponse> generate(
        io.swarmrl.v1.GenerateRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getGenerateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Records a reward for the episode, for one of its models, or for one of
     * its calls. INVALID_ARGUMENT for a reward that is not finite or a model the
     * episode does not list, FAILED_PRECONDITION when the episode is not open.
     * </pre>
     */
    public io.swarmrl.v1.SubmitRewardResponse submitReward(io.swarmrl.v1.SubmitRewardRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSubmitRewardMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Ends an episode. Once this returns, the episode is durable and queued for
     * training by every model it lists, in one store transaction: a server
     * killed meanwhile leaves it queued for all of them or for none. FAILED_PRECONDITION when it was already ended or aborted
     * (unless the request_id repeats the call that ended it) or has no reward.
     * </pre>
     */
    public io.swarmrl.v1.EndEpisodeResponse endEpisode(io.swarmrl.v1.EndEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getEndEpisodeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Aborts an episode: its calls are kept for inspection but never trained.
     * </pre>
     */
    public io.swarmrl.v1.AbortEpisodeResponse abortEpisode(io.swarmrl.v1.AbortEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAbortEpisodeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Returns an episode and, on request, the calls recorded in it.
     * </pre>
     */
    public io.swarmrl.v1.GetEpisodeResponse getEpisode(io.swarmrl.v1.GetEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetEpisodeMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * EpisodeService runs episodes: a client starts one, generates with the
   * server's models (each call recorded with its exact token ids and logprobs),
   * reports rewards, and ends or aborts it. Mutating calls carry a client-made
   * request_id; a retried call with the same request_id is applied once and
   * answered with the first answer.
   * </pre>
   */
  public static final class EpisodeServiceFutureStub extends io.grpc.stub.AbstractFutureStub<EpisodeServiceFutureStub> {
    private EpisodeServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected EpisodeServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new EpisodeServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Starts an episode. NOT_FOUND for an unknown model or session,
     * INVALID_ARGUMENT for a malformed request.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.StartEpisodeResponse> startEpisode(
        io.swarmrl.v1.StartEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getStartEpisodeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Records a reward for the episode, for one of its models, or for one of
     * its calls. INVALID_ARGUMENT for a reward that is not finite or a model the
     * episode does not list, FAILED_PRECONDITION when the episode is not open.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.SubmitRewardResponse> submitReward(
        io.swarmrl.v1.SubmitRewardRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSubmitRewardMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Ends an episode. Once this returns, the episode is durable and queued for
     * training by every model it lists, in one store transaction: a server
     * killed meanwhile leaves it queued for all of them or for none. FAILED_PRECONDITION when it was already ended or aborted
     * (unless the request_id repeats the call that ended it) or has no reward.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.EndEpisodeResponse> endEpisode(
        io.swarmrl.v1.EndEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getEndEpisodeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Aborts an episode: its calls are kept for inspection but never trained.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.AbortEpisodeResponse> abortEpisode(
        io.swarmrl.v1.AbortEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAbortEpisodeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Returns an episode and, on request, the calls recorded in it.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.GetEpisodeResponse> getEpisode(
        io.swarmrl.v1.GetEpisodeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetEpisodeMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_START_EPISODE = 0;
  private static final int METHODID_GENERATE = 1;
  private static final int METHODID_SUBMIT_REWARD = 2;
  private static final int METHODID_END_EPISODE = 3;
  private static final int METHODID_ABORT_EPISODE = 4;
  private static final int METHODID_GET_EPISODE = 5;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final EpisodeServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(EpisodeServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_START_EPISODE:
          serviceImpl.startEpisode((io.swarmrl.v1.StartEpisodeRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.StartEpisodeResponse>) responseObserver);
          break;
        case METHODID_GENERATE:
          serviceImpl.generate((io.swarmrl.v1.GenerateRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.GenerateResponse>) responseObserver);
          break;
        case METHODID_SUBMIT_REWARD:
          serviceImpl.submitReward((io.swarmrl.v1.SubmitRewardRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.SubmitRewardResponse>) responseObserver);
          break;
        case METHODID_END_EPISODE:
          serviceImpl.endEpisode((io.swarmrl.v1.EndEpisodeRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.EndEpisodeResponse>) responseObserver);
          break;
        case METHODID_ABORT_EPISODE:
          serviceImpl.abortEpisode((io.swarmrl.v1.AbortEpisodeRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.AbortEpisodeResponse>) responseObserver);
          break;
        case METHODID_GET_EPISODE:
          serviceImpl.getEpisode((io.swarmrl.v1.GetEpisodeRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.GetEpisodeResponse>) responseObserver);
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

  private static abstract class EpisodeServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    EpisodeServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.swarmrl.v1.EpisodeServiceProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("EpisodeService");
    }
  }

  private static final class EpisodeServiceFileDescriptorSupplier
      extends EpisodeServiceBaseDescriptorSupplier {
    EpisodeServiceFileDescriptorSupplier() {}
  }

  private static final class EpisodeServiceMethodDescriptorSupplier
      extends EpisodeServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    EpisodeServiceMethodDescriptorSupplier(String methodName) {
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
      synchronized (EpisodeServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new EpisodeServiceFileDescriptorSupplier())
              .addMethod(getStartEpisodeMethod())
              .addMethod(getGenerateMethod())
              .addMethod(getSubmitRewardMethod())
              .addMethod(getEndEpisodeMethod())
              .addMethod(getAbortEpisodeMethod())
              .addMethod(getGetEpisodeMethod())
              .build();
        }
      }
    }
    return result;
  }
}

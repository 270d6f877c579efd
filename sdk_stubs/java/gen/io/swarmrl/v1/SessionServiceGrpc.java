package io.swarmrl.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * SessionService keeps track of the clients attached to the server. A client
 * opens a session, renews its lease by heartbeat, and watches the server's
 * events. When a lease expires, the session's open episodes are aborted.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: swarmrl/v1/session_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class SessionServiceGrpc {

  private SessionServiceGrpc() {}

  public static final String SERVICE_NAME = "swarmrl.v1.SessionService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.OpenSessionRequest,
      io.swarmrl.v1.OpenSessionResponse> getOpenSessionMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "OpenSession",
      requestType = io.swarmrl.v1.OpenSessionRequest.class,
      responseType = io.swarmrl.v1.OpenSessionResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.OpenSessionRequest,
      io.swarmrl.v1.OpenSessionResponse> getOpenSessionMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.OpenSessionRequest, io.swarmrl.v1.OpenSessionResponse> getOpenSessionMethod;
    if ((getOpenSessionMethod = SessionServiceGrpc.getOpenSessionMethod) == null) {
      synchronized (SessionServiceGrpc.class) {
        if ((getOpenSessionMethod = SessionServiceGrpc.getOpenSessionMethod) == null) {
          SessionServiceGrpc.getOpenSessionMethod = getOpenSessionMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.OpenSessionRequest, io.swarmrl.v1.OpenSessionResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "OpenSession"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.OpenSessionRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.OpenSessionResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SessionServiceMethodDescriptorSupplier("OpenSession"))
              .build();
        }
      }
    }
    return getOpenSessionMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.HeartbeatRequest,
      io.swarmrl.v1.HeartbeatResponse> getHeartbeatMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Heartbeat",
      requestType = io.swarmrl.v1.HeartbeatRequest.class,
      responseType = io.swarmrl.v1.HeartbeatResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.HeartbeatRequest,
      io.swarmrl.v1.HeartbeatResponse> getHeartbeatMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.HeartbeatRequest, io.swarmrl.v1.HeartbeatResponse> getHeartbeatMethod;
    if ((getHeartbeatMethod = SessionServiceGrpc.getHeartbeatMethod) == null) {
      synchronized (SessionServiceGrpc.class) {
        if ((getHeartbeatMethod = SessionServiceGrpc.getHeartbeatMethod) == null) {
          SessionServiceGrpc.getHeartbeatMethod = getHeartbeatMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.HeartbeatRequest, io.swarmrl.v1.HeartbeatResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Heartbeat"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.HeartbeatRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.HeartbeatResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SessionServiceMethodDescriptorSupplier("Heartbeat"))
              .build();
        }
      }
    }
    return getHeartbeatMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.CloseSessionRequest,
      io.swarmrl.v1.CloseSessionResponse> getCloseSessionMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CloseSession",
      requestType = io.swarmrl.v1.CloseSessionRequest.class,
      responseType = io.swarmrl.v1.CloseSessionResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.CloseSessionRequest,
      io.swarmrl.v1.CloseSessionResponse> getCloseSessionMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.CloseSessionRequest, io.swarmrl.v1.CloseSessionResponse> getCloseSessionMethod;
    if ((getCloseSessionMethod = SessionServiceGrpc.getCloseSessionMethod) == null) {
      synchronized (SessionServiceGrpc.class) {
        if ((getCloseSessionMethod = SessionServiceGrpc.getCloseSessionMethod) == null) {
          SessionServiceGrpc.getCloseSessionMethod = getCloseSessionMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.CloseSessionRequest, io.swarmrl.v1.CloseSessionResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CloseSession"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.CloseSessionRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.CloseSessionResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SessionServiceMethodDescriptorSupplier("CloseSession"))
              .build();
        }
      }
    }
    return getCloseSessionMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.DeclareDoneRequest,
      io.swarmrl.v1.DeclareDoneResponse> getDeclareDoneMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeclareDone",
      requestType = io.swarmrl.v1.DeclareDoneRequest.class,
      responseType = io.swarmrl.v1.DeclareDoneResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.DeclareDoneRequest,
      io.swarmrl.v1.DeclareDoneResponse> getDeclareDoneMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.DeclareDoneRequest, io.swarmrl.v1.DeclareDoneResponse> getDeclareDoneMethod;
    if ((getDeclareDoneMethod = SessionServiceGrpc.getDeclareDoneMethod) == null) {
      synchronized (SessionServiceGrpc.class) {
        if ((getDeclareDoneMethod = SessionServiceGrpc.getDeclareDoneMethod) == null) {
          SessionServiceGrpc.getDeclareDoneMethod = getDeclareDoneMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.DeclareDoneRequest, io.swarmrl.v1.DeclareDoneResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeclareDone"))
              .setIdempotent(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.DeclareDoneRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.DeclareDoneResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SessionServiceMethodDescriptorSupplier("DeclareDone"))
              .build();
        }
      }
    }
    return getDeclareDoneMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.swarmrl.v1.WatchEventsRequest,
      io.swarmrl.v1.WatchEventsResponse> getWatchEventsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "WatchEvents",
      requestType = io.swarmrl.v1.WatchEventsRequest.class,
      responseType = io.swarmrl.v1.WatchEventsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.swarmrl.v1.WatchEventsRequest,
      io.swarmrl.v1.WatchEventsResponse> getWatchEventsMethod() {
    io.grpc.MethodDescriptor<io.swarmrl.v1.WatchEventsRequest, io.swarmrl.v1.WatchEventsResponse> getWatchEventsMethod;
    if ((getWatchEventsMethod = SessionServiceGrpc.getWatchEventsMethod) == null) {
      synchronized (SessionServiceGrpc.class) {
        if ((getWatchEventsMethod = SessionServiceGrpc.getWatchEventsMethod) == null) {
          SessionServiceGrpc.getWatchEventsMethod = getWatchEventsMethod =
              io.grpc.MethodDescriptor.<io.swarmrl.v1.WatchEventsRequest, io.swarmrl.v1.WatchEventsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "WatchEvents"))
              .setSafe(true)
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.WatchEventsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.swarmrl.v1.WatchEventsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new SessionServiceMethodDescriptorSupplier("WatchEvents"))
              .build();
        }
      }
    }
    return getWatchEventsMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static SessionServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<SessionServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<SessionServiceStub>() {
        @java.lang.Override
        public SessionServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new SessionServiceStub(channel, callOptions);
        }
      };
    return SessionServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static SessionServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<SessionServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<SessionServiceBlockingStub>() {
        @java.lang.Override
        public SessionServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new SessionServiceBlockingStub(channel, callOptions);
        }
      };
    return SessionServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static SessionServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<SessionServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<SessionServiceFutureStub>() {
        @java.lang.Override
        public SessionServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new SessionServiceFutureStub(channel, callOptions);
        }
      };
    return SessionServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * SessionService keeps track of the clients attached to the server. A client
   * opens a session, renews its lease by heartbeat, and watches the server's
   * events. When a lease expires, the session's open episodes are aborted.
   * </pre>
   */
  public static abstract class SessionServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Opens (or reopens) a session. The client chooses the session id, so the
     * call is idempotent: reopening a live session renews it.
     * </pre>
     */
    public void openSession(io.swarmrl.v1.OpenSessionRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.OpenSessionResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getOpenSessionMethod(), responseObserver);
    }

    /**
     * <pre>
     * Renews a session's lease. NOT_FOUND when the server does not know the
     * session (it expired, or the server lost it); the client then reopens it.
     * </pre>
     */
    public void heartbeat(io.swarmrl.v1.HeartbeatRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.HeartbeatResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getHeartbeatMethod(), responseObserver);
    }

    /**
     * <pre>
     * Closes a session and aborts its open episodes.
     * </pre>
     */
    public void closeSession(io.swarmrl.v1.CloseSessionRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.CloseSessionResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCloseSessionMethod(), responseObserver);
    }

    /**
     * <pre>
     * Declares this client's share of the current training batch done. With the
     * trainer's batch rule "clients", a batch is ready once every session with a
     * live lease has declared. NOT_FOUND for an unknown session or model,
     * FAILED_PRECONDITION when no named model is trainable.
     * </pre>
     */
    public void declareDone(io.swarmrl.v1.DeclareDoneRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.DeclareDoneResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeclareDoneMethod(), responseObserver);
    }

    /**
     * <pre>
     * Streams server events with increasing sequence numbers. To resume after a
     * disconnect, pass the last sequence seen as after_sequence.
     * </pre>
     */
    public void watchEvents(io.swarmrl.v1.WatchEventsRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.WatchEventsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getWatchEventsMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getOpenSessionMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.OpenSessionRequest,
                io.swarmrl.v1.OpenSessionResponse>(
                  this, METHODID_OPEN_SESSION)))
          .addMethod(
            getHeartbeatMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.HeartbeatRequest,
                io.swarmrl.v1.HeartbeatResponse>(
                  this, METHODID_HEARTBEAT)))
          .addMethod(
            getCloseSessionMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.CloseSessionRequest,
                io.swarmrl.v1.CloseSessionResponse>(
                  this, METHODID_CLOSE_SESSION)))
          .addMethod(
            getDeclareDoneMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.swarmrl.v1.DeclareDoneRequest,
                io.swarmrl.v1.DeclareDoneResponse>(
                  this, METHODID_DECLARE_DONE)))
          .addMethod(
            getWatchEventsMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.swarmrl.v1.WatchEventsRequest,
                io.swarmrl.v1.WatchEventsResponse>(
                  this, METHODID_WATCH_EVENTS)))
          .build();
    }
  }

  /**
   * <pre>
   * SessionService keeps track of the clients attached to the server. A client
   * opens a session, renews its lease by heartbeat, and watches the server's
   * events. When a lease expires, the session's open episodes are aborted.
   * </pre>
   */
  public static final class SessionServiceStub extends io.grpc.stub.AbstractAsyncStub<SessionServiceStub> {
    private SessionServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected SessionServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new SessionServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Opens (or reopens) a session. The client chooses the session id, so the
     * call is idempotent: reopening a live session renews it.
     * </pre>
     */
    public void openSession(io.swarmrl.v1.OpenSessionRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.OpenSessionResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getOpenSessionMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Renews a session's lease. NOT_FOUND when the server does not know the
     * session (it expired, or the server lost it); the client then reopens it.
     * </pre>
     */
    public void heartbeat(io.swarmrl.v1.HeartbeatRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.HeartbeatResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getHeartbeatMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Closes a session and aborts its open episodes.
     * </pre>
     */
    public void closeSession(io.swarmrl.v1.CloseSessionRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.CloseSessionResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCloseSessionMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Declares this client's share of the current training batch done. With the
     * trainer's batch rule "clients", a batch is ready once every session with a
     * live lease has declared. NOT_FOUND for an unknown session or model,
     * FAILED_PRECONDITION when no named model is trainable.
     * </pre>
     */
    public void declareDone(io.swarmrl.v1.DeclareDoneRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.DeclareDoneResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeclareDoneMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Streams server events with increasing sequence numbers. To resume after a
     * disconnect, pass the last sequence seen as after_sequence.
     * </pre>
     */
    public void watchEvents(io.swarmrl.v1.WatchEventsRequest request,
        io.grpc.stub.StreamObserver<io.swarmrl.v1.WatchEventsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getWatchEventsMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * SessionService keeps track of the clients attached to the server. A client
   * opens a session, renews its lease by heartbeat, and watches the server's
   * events. When a lease expires, the session's open episodes are aborted.
   * </pre>
   */
  public static final class SessionServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<SessionServiceBlockingStub> {
    private SessionServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected SessionServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new SessionServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Opens (or reopens) a session. The client chooses the session id, so the
     * call is idempotent: reopening a live session renews it.
     * </pre>
     */
    public io.swarmrl.v1.OpenSessionResponse openSession(io.swarmrl.v1.OpenSessionRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getOpenSessionMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Renews a session's lease. NOT_FOUND when the server does not know the
     * session (it expired, or the server lost it); the client then reopens it.
     * </pre>
     */
    public io.swarmrl.v1.HeartbeatResponse heartbeat(io.swarmrl.v1.HeartbeatRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getHeartbeatMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Closes a session and aborts its open episodes.
     * </pre>
     */
    public io.swarmrl.v1.CloseSessionResponse closeSession(io.swarmrl.v1.CloseSessionRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCloseSessionMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Declares this client's share of the current training batch done. With the
     * trainer's batch rule "clients", a batch is ready once every session with a
     * live lease has declared. NOT_FOUND for an unknown session or model,
     * FAILED_PRECONDITION when no named model is trainable.
     * </pre>
     */
    public io.swarmrl.v1.DeclareDoneResponse declareDone(io.swarmrl.v1.DeclareDoneRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeclareDoneMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Streams server events with increasing sequence numbers. To resume after a
     * disconnect, pass the last sequence seen as after_sequence.
     * </pre>
     */
    public java.util.Iterator<io.swarmrl.v1.WatchEventsResponse> watchEvents(
        io.swarmrl.v1.WatchEventsRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getWatchEventsMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * SessionService keeps track of the clients attached to the server. A client
   * opens a session, renews its lease by heartbeat, and watches the server's
   * events. When a lease expires, the session's open episodes are aborted.
   * </pre>
   */
  public static final class SessionServiceFutureStub extends io.grpc.stub.AbstractFutureStub<SessionServiceFutureStub> {
    private SessionServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected SessionServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new SessionServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Opens (or reopens) a session. The client chooses the session id, so the
     * call is idempotent: reopening a live session renews it.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.OpenSessionResponse> openSession(
        io.swarmrl.v1.OpenSessionRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getOpenSessionMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Renews a session's lease. NOT_FOUND when the server does not know the
     * session (it expired, or the server lost it); the client then reopens it.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.HeartbeatResponse> heartbeat(
        io.swarmrl.v1.HeartbeatRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getHeartbeatMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Closes a session and aborts its open episodes.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.CloseSessionResponse> closeSession(
        io.swarmrl.v1.CloseSessionRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCloseSessionMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Declares this client's share of the current training batch done. With the
     * trainer's batch rule "clients", a batch is ready once every session with a
     * live lease has declared. NOT_FOUND for an unknown session or model,
     * FAILED_PRECONDITION when no named model is trainable.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.swarmrl.v1.DeclareDoneResponse> declareDone(
        io.swarmrl.v1.DeclareDoneRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeclareDoneMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_OPEN_SESSION = 0;
  private static final int METHODID_HEARTBEAT = 1;
  private static final int METHODID_CLOSE_SESSION = 2;
  private static final int METHODID_DECLARE_DONE = 3;
  private static final int METHODID_WATCH_EVENTS = 4;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final SessionServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(SessionServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_OPEN_SESSION:
          serviceImpl.openSession((io.swarmrl.v1.OpenSessionRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.OpenSessionResponse>) responseObserver);
          break;
        case METHODID_HEARTBEAT:
          serviceImpl.heartbeat((io.swarmrl.v1.HeartbeatRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.HeartbeatResponse>) responseObserver);
          break;
        case METHODID_CLOSE_SESSION:
          serviceImpl.closeSession((io.swarmrl.v1.CloseSessionRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.CloseSessionResponse>) responseObserver);
          break;
        case METHODID_DECLARE_DONE:
          serviceImpl.declareDone((io.swarmrl.v1.DeclareDoneRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.DeclareDoneResponse>) responseObserver);
          break;
        case METHODID_WATCH_EVENTS:
          serviceImpl.watchEvents((io.swarmrl.v1.WatchEventsRequest) request,
              (io.grpc.stub.StreamObserver<io.swarmrl.v1.WatchEventsResponse>) responseObserver);
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

  private static abstract class SessionServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    SessionServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.swarmrl.v1.SessionServiceProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("SessionService");
    }
  }

  private static final class SessionServiceFileDescriptorSupplier
      extends SessionServiceBaseDescriptorSupplier {
    SessionServiceFileDescriptorSupplier() {}
  }

  private static final class SessionServiceMethodDescriptorSupplier
      extends SessionServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    SessionServiceMethodDescriptorSupplier(String methodName) {
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
      synchronized (SessionServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new SessionServiceFileDescriptorSupplier())
              .addMethod(getOpenSessionMethod())
              .addMethod(getHeartbeatMethod())
              .addMethod(getCloseSessionMethod())
              .addMethod(getDeclareDoneMethod())
              .addMethod(getWatchEventsMethod())
              .build();
        }
      }
    }
    return result;
  }
}

"""Observability, in one place: what a running server and its trainers report.

- `telemetry`: Prometheus metrics (``GET /metrics``) and the in-memory totals and
  recent errors behind them;
- `live`: the live snapshot, the protos' ``LiveSnapshot`` (``AdminService.GetLiveSnapshot``;
  the HTTP shim serves the same message as JSON at ``GET /swarmrl/live``), which
  ``swarmrl top`` polls;
- `metrics`: each training step's metrics, to TensorBoard, ``metrics.jsonl`` and the
  console;
- `plots`: ``swarmrl plot``, PNG curves from ``metrics.jsonl`` files;
- `viewer`: ``swarmrl view`` and the shim's ``/view/``, episodes and their timelines in a
  browser.

The front doors only adapt: `grpc.observe` and `http.observe` time each request into
`telemetry` and mount the live snapshot and the viewer.
"""

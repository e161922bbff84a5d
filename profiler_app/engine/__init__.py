"""Measurement engine for performance sweeps against Triton.

- `stats`: percentiles, stability, knee and recommendation (perf_analyzer's rules).
- `inputs`: request tensors from model metadata/config, shapes and input data.
- `loadgen`: the built-in load generator (`run_sweep`, `run_sweep_sync`) of the
  `profiler_app.params.SweepParams` it is given; `results` what it returns, `merging` how
  windows and levels are built from the workers' replies.
- `worker_pool`, `load_workers`: the worker processes that keep the load on Triton (what
  they send: `worker_requests`; what they record: `worker_records`).
- `remote`, `agent`, `agent_link`: load from several hosts (`load_messages`, `load_session`).
- `perf_analyzer`: run the reference perf_analyzer (`perf_analyzer_command`: locate it and
  its command line; `perf_analyzer_output`: parse what it prints; `perf_analyzer_csv`: its
  CSV, and ours in its shape).
"""

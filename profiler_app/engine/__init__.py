"""Measurement engine for performance sweeps against Triton.

- `stats`: percentiles, stability, knee and recommendation (perf_analyzer's rules).
- `inputs`: request tensors from model metadata/config, shapes and input data.
- `loadgen`: the built-in load generator (`run_sweep`, `run_sweep_sync`) of the
  `profiler_app.params.SweepParams` it is given.
- `load_workers`: the worker processes that keep the load on Triton.
- `perf_analyzer`: locate, run and parse the reference perf_analyzer; CSV export.
"""

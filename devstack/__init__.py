"""The development stack: what `make run` starts and supervises (`python -m devstack`), and
the service starters (tritonserver, Redis, free ports) that the tests and benchmarks share.

Not part of the deployed application, which never imports it: the overview reads the
supervisor's note file through common.supervisor_note."""

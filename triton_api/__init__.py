"""Everything that talks to Triton's control side, in one package, with no Django in it.

The pages, the API, the CLI, the poller and the search call `client` (sync); the load
engine calls `aio` for readiness, metadata, config and statistics (it keeps its own
inference transports, in profiler_app/engine). All of them, the transports included, are
built from `connection` (a server's address, key and timeout); `address` is the one reader
of host:port. Triton's formats are read here once:
`prometheus` parses the metrics page, `gpus` is the only module that knows the GPU metric
families, `statistics` flattens the statistics extension and derives rates from the
metrics, and `messages` explains load failures.

Every setting (addresses, key, timeouts, what to remember per page view) is a parameter:
the dashboard's glue, ``registry.triton_clients``, reads them from its settings and
keeps one client per server; ``repository_app.server_facts`` tells the validator what a
server is.
"""

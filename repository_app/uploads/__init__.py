"""Versioned model uploads: chunked, resumable staging, archive scanning, atomic publishing.

- ``names``: Triton's name rules and the file names each backend loads.
- ``staging``: upload sessions, chunk appends at the expected offset, sha256, size limits.
- ``archives``: scan-then-extract for .zip, .tar and .tar.gz.
- ``generate``: config.pbtxt for a new model (from ONNX, or a skeleton).
- ``publish``: verify, prepare and publish a version by one rename under a per-model lock.
- ``sharing``: what the servers sharing the repository say of a model (busy, loaded).
- ``deleting``: delete a version or a whole model.
- ``version_policy``: the version-policy shortcut.
- ``reconcile``: the startup reconciler for stale staging data.

The protocol is described in docs/uploads.md.
"""

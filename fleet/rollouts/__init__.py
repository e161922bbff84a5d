"""Rollouts: load, unload or reload one model on a set of Triton servers at once.

- ``choose``: which servers (every server on one repository, a label, a hand-picked list),
  the one entry for the page, the API and the CLI.
- ``runner``: a ``Rollout`` with one ``RolloutTarget`` per server, each run through the
  control path (``repository_app.control``), checked, audited and published live.
- ``offer``: after a config save on a shared repository, "reload where it is loaded".
- ``views``, ``api``, ``consumers``: the pages, the REST API and the live socket.
"""

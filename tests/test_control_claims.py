"""A load, unload or reload claims its (server, model) for every process: the web runs
several Daphnes, and the CLI and the workers act too."""

from __future__ import annotations

from devstack.services import free_port
from repository_app import control, events


def test_a_claim_is_shared_through_redis_and_released_only_by_its_owner(redis_db):
    key = control._claim_key("default", "add_sub")
    redis_db.set(key, "another-process")  # another web process's claim
    assert not control._take("default", "add_sub")
    redis_db.delete(key)
    assert control._take("default", "add_sub")
    assert redis_db.ttl(key) > 0 and not control._take("default", "add_sub")
    # Expired and taken again by another process meanwhile: that claim is not ours to end.
    redis_db.set(key, "another-process")
    control._give_back("default", "add_sub")
    assert redis_db.get(key) == b"another-process"
    redis_db.delete(key)
    assert control._take("default", "add_sub")
    control._give_back("default", "add_sub")
    assert not redis_db.exists(key) and not control._inflight


def test_without_redis_a_claim_still_holds_in_its_own_process(settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    events._clients.clear()
    try:
        assert control._take("default", "add_sub")
        assert not control._take("default", "add_sub")
        control._give_back("default", "add_sub")
        assert not control._inflight
    finally:
        events._clients.clear()

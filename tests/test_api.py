"""The REST API: authentication, roles, JSON errors, and responses that match the schema."""

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token

from team.models import AuditEvent
from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _token_client(name: str, role: str) -> Client:
    user = get_user_model().objects.create_user(name)
    set_role(user, role)
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


@pytest.fixture()
def schema():
    client = _token_client("schema-reader", VIEWER)
    return yaml.safe_load(client.get("/api/v1/schema/").content)


def _required(schema, component: str) -> set[str]:
    return set(schema["components"]["schemas"][component].get("required", []))


def test_anonymous_requests_get_a_json_401():
    response = Client().get("/api/v1/models/")
    assert response.status_code in (401, 403)
    assert response.json()["message"].startswith("Authentication credentials were not provided")


def test_model_list_and_detail_match_the_schema(schema, triton):
    client = _token_client("reader", VIEWER)
    models = client.get("/api/v1/models/").json()
    names = [m["name"] for m in models]
    assert {"add_sub", "add_batched", "busy_compute"} <= set(names)
    for model in models:
        assert _required(schema, "Model") <= set(model)
        assert _required(schema, "ModelState") <= set(model["triton"])
    detail = client.get("/api/v1/models/add_sub/").json()
    assert detail["backend"] == "python" and detail["versions_on_disk"] == [1]
    assert client.get("/api/v1/models/nope/").json() == {
        "message": "no model 'nope' on disk or in Triton",
        "field": None,
    }
    state = client.get("/api/v1/models/add_sub/state").json()
    assert _required(schema, "ModelState") <= set(state)


def test_an_operator_loads_and_unloads_through_the_api_and_it_is_audited(triton):
    client = _token_client("robot-op", OPERATOR)
    response = client.post("/api/v1/models/busy_compute/load?wait=1")
    assert response.status_code == 200, response.content
    assert response.json()["states"]["state"] == "READY"
    response = client.post("/api/v1/models/busy_compute/unload?wait=1")
    assert response.status_code == 200
    actions = list(AuditEvent.objects.filter(username="robot-op").values_list("action", "outcome"))
    assert ("load", "ok") in actions and ("unload", "ok") in actions


def test_a_viewer_is_refused_and_nothing_changes(triton):
    client = _token_client("robot-viewer", VIEWER)
    before = [
        s.state for s in TritonClient(triton.grpc_url, triton.metrics_url).model_states("add_sub")
    ]
    response = client.post("/api/v1/models/add_sub/load?wait=1")
    assert response.status_code == 403
    assert response.json() == {"message": "your role cannot load or unload models", "field": None}
    after = [
        s.state for s in TritonClient(triton.grpc_url, triton.metrics_url).model_states("add_sub")
    ]
    assert before == after
    assert AuditEvent.objects.filter(username="robot-viewer", outcome="denied").count() == 1


def test_a_failed_load_answers_409_with_tritons_reason(triton, failing_model):
    client = _token_client("robot-op2", OPERATOR)
    response = client.post(f"/api/v1/models/{failing_model}/load?wait=1")
    assert response.status_code == 409
    assert "deliberate failure in initialize" in response.json()["message"]


def test_the_docs_page_is_served_without_a_cdn():
    client = _token_client("doc-reader", VIEWER)
    html = client.get("/api/v1/docs/").content.decode()
    assert "swagger-ui" in html
    # Every script and stylesheet comes from this origin (random tokens in the page may
    # contain any letters, so look at the URLs, not at substrings of the whole page).
    import re

    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls and all(not u.startswith(("http:", "https:", "//")) for u in urls), urls

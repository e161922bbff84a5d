"""The Servers page's add and edit form: it only gathers the fields; ``server_admin``
checks them (``server_rules``) and the view puts each refusal back on its field."""

from __future__ import annotations

from typing import Any

from django import forms

from registry.server_rules import InvalidServer, Refusal, labels_from_text, labels_text
from registry.servers import Server


class ServerForm(forms.Form):
    name = forms.CharField(
        help_text="1 to 40 lower-case letters, digits and '-': URLs and the CLI name it.",
        strip=True,
    )
    grpc_url = forms.CharField(label="gRPC address", help_text="host:port, e.g. triton-a:8001")
    http_url = forms.CharField(
        label="HTTP address", required=False,
        help_text="host:port; left empty: the gRPC address's host at port 8000.",
    )  # fmt: skip
    metrics_url = forms.CharField(
        label="Metrics URL", required=False,
        help_text="left empty: http://<the gRPC address's host>:8002/metrics.",
    )  # fmt: skip
    repository = forms.CharField(
        label="Model repository", required=False,
        help_text="The repository as the dashboard's host sees it (absolute path); left "
        "empty: MODEL_REPOSITORY, shared with the server 'default'.",
    )  # fmt: skip
    labels = forms.CharField(
        required=False, widget=forms.TextInput(attrs={"placeholder": "gpu=H200, env=prod"}),
        help_text="NAME=VALUE, separated by commas or spaces.",
    )  # fmt: skip
    api_key = forms.CharField(
        label="Restricted-API key", required=False, strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="The value of Triton's --grpc-restricted-protocol=...:KEY=VALUE: stored, "
        "never shown again.",
    )  # fmt: skip
    api_key_header = forms.CharField(
        label="Key name", required=False, initial="dashboard-key",
        help_text="The KEY of --grpc-restricted-protocol=...:KEY=VALUE.",
    )  # fmt: skip
    require_local_worker = forms.BooleanField(
        label="Requires its own worker", required=False,
        help_text="Its sweeps and searches run only on a worker consuming triton.<name> (on its "
        "host); without one they wait, saying so, instead of using the default queue.",
    )  # fmt: skip
    clear_api_key = forms.BooleanField(label="Clear the stored key", required=False)

    def __init__(self, *args: Any, editing: Server | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing is None:
            del self.fields["clear_api_key"]
            return
        del self.fields["name"]  # a server's name does not change
        for name in ("http_url", "metrics_url", "repository", "api_key_header"):
            self.fields[name].required = True
            self.fields[name].help_text = ""
        key = self.fields["api_key"]
        key.help_text = (
            "A key is stored: leave empty to keep it." if editing.api_key else "No key is stored."
        ) + " Stored, never shown again."
        if not editing.api_key:
            del self.fields["clear_api_key"]
        if not self.is_bound:
            self.initial = {
                "grpc_url": editing.grpc_url,
                "http_url": editing.http_url,
                "metrics_url": editing.metrics_url,
                "repository": str(editing.repository),
                "labels": labels_text(editing.labels),
                "api_key_header": editing.api_key_header,
                "require_local_worker": editing.require_local_worker,
            }

    def fields_for_admin(self) -> dict[str, Any]:
        """What ``server_admin`` gets. The form's own refusals (the labels box, a key typed
        and cleared at once) travel as ``Refusal`` values: ``server_admin`` reports them with
        every other refusal, each on its field, its checks knowing who asks."""
        data = dict(self.cleaned_data)
        clear = data.pop("clear_api_key", False)
        try:
            data["labels"] = labels_from_text(data.get("labels") or "")
        except ValueError as exc:
            data["labels"] = Refusal(str(exc))
        if clear and data.get("api_key"):
            data["api_key"] = Refusal("type a new key or clear the stored one, not both")
        elif clear:
            data["api_key"] = ""
        elif not data.get("api_key"):
            data.pop("api_key", None)  # an empty box: the stored key stays (or none is set)
        return data

    def refused(self, exc: InvalidServer) -> None:
        for field, message in exc.errors.items():
            self.add_error(field if field in self.fields else None, message)

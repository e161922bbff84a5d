from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.password_validation import validate_password

from .narrowing import NARROWED_ROLES
from .roles import ROLES


class NewUserForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput, help_text="At least 8 characters.")
    role = forms.ChoiceField(choices=[(r, r) for r in ROLES])

    def clean_username(self) -> str:
        name = self.cleaned_data["username"].strip()
        if get_user_model().objects.filter(username=name).exists():
            raise forms.ValidationError(f"a user named {name!r} already exists")
        return name

    def clean_password(self) -> str:
        password = self.cleaned_data["password"]
        validate_password(password)
        return password


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=[(r, r) for r in ROLES])


class ActiveForm(forms.Form):
    active = forms.TypedChoiceField(choices=[("1", "active"), ("0", "inactive")], coerce=int)


class AdminSetPasswordForm(SetPasswordForm):
    """An admin sets a new password for someone else: Django's validators apply (length,
    common passwords, similarity to that user's name)."""


class AuditFilterForm(forms.Form):
    user = forms.CharField(required=False)
    model = forms.CharField(required=False)
    action = forms.CharField(required=False)


class NarrowingForm(forms.Form):
    """One narrowing as the Users page takes it: a server's name or a label key=value."""

    selector = forms.CharField(
        max_length=130, help_text="a server's name, or a label key=value (e.g. env=prod)"
    )
    role = forms.ChoiceField(choices=[(r, r.lower()) for r in NARROWED_ROLES])

    def selector_fields(self) -> dict[str, str]:
        """``server=`` or ``label=`` for server_access.narrow."""
        text = self.cleaned_data["selector"].strip()
        return {"label": text} if "=" in text else {"server": text}

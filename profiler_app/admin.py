from django.contrib import admin

from .models import Sweep, SweepPoint, SweepSlot


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "model", "state", "engine", "server", "created_by", "created_at")
    list_filter = ("state", "engine", "model")
    readonly_fields = ("config_text", "config_sha256", "command", "summary", "params")


admin.site.register(SweepPoint)
admin.site.register(SweepSlot)

from rest_framework import serializers

from audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "actor",
            "actor_user",
            "actor_token",
            "ip",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
        ]

from rest_framework import serializers

from .models import ApiToken


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "key_prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = ["key_prefix", "created_at", "last_used_at", "revoked_at"]


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown only in this response.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    tenant = serializers.CharField()
    role = serializers.CharField()
    tenants = serializers.ListField(child=serializers.DictField())

from django.contrib.auth.validators import UnicodeUsernameValidator
from rest_framework import serializers

from nvke.tenancy.models import ApiToken, Invitation, Membership
from nvke.tenancy.roles import Role


class ApiTokenSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "user",
            "scope",
            "key_prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
        ]
        read_only_fields = ["key_prefix", "created_at", "last_used_at", "revoked_at"]
        extra_kwargs = {"name": {"max_length": 100}}


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown only in this response.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    role = serializers.ChoiceField(choices=[r.value for r in Role])

    class Meta:
        model = Membership
        fields = ["id", "username", "role", "created_at"]
        read_only_fields = ["created_at"]


class InvitationSerializer(serializers.ModelSerializer):
    """An invitation as its tenant's owners and admins see it."""

    role = serializers.ChoiceField(choices=[r.value for r in Role])
    invited_by = serializers.CharField(source="invited_by.username", read_only=True, allow_null=True)

    class Meta:
        model = Invitation
        fields = ["id", "username", "role", "invited_by", "created_at", "expires_at"]
        read_only_fields = ["created_at", "expires_at"]
        # The user model's own rule, so the schema states it (pattern): no bidi or control characters.
        extra_kwargs = {"username": {"max_length": 150, "validators": [UnicodeUsernameValidator()]}}


class MyInvitationSerializer(serializers.ModelSerializer):
    """An invitation as its invitee sees it: which tenant, which role, from whom, until when."""

    tenant = serializers.CharField(source="tenant.name")
    role = serializers.ChoiceField(choices=[r.value for r in Role])
    invited_by = serializers.CharField(source="invited_by.username", allow_null=True)

    class Meta:
        model = Invitation
        fields = ["id", "tenant", "role", "invited_by", "created_at", "expires_at"]
        read_only_fields = fields


class JoinedTenantSerializer(serializers.Serializer):
    """The tenant an accepted invitation joined, as `me/` lists a user's tenants."""

    id = serializers.IntegerField(source="tenant_id")
    name = serializers.CharField(source="tenant.name")
    role = serializers.CharField()


class MembershipRoleSerializer(serializers.ModelSerializer):
    """A membership's only changeable field."""

    role = serializers.ChoiceField(choices=[r.value for r in Role])

    class Meta:
        model = Membership
        fields = ["role"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    tenant = serializers.CharField()
    role = serializers.CharField()
    tenants = serializers.ListField(child=serializers.DictField())


class QuotaUseSerializer(serializers.Serializer):
    used = serializers.IntegerField()
    limit = serializers.IntegerField(allow_null=True, help_text="null: unlimited")


class GpuQuotaUseSerializer(QuotaUseSerializer):
    gpu_model = serializers.CharField()
    default = serializers.BooleanField(help_text="The limit is the platform's default, not the tenant's own")


class QuotaSerializer(serializers.Serializer):
    clusters = QuotaUseSerializer()
    gpus = GpuQuotaUseSerializer(many=True, help_text="Node pools' ceilings (gpus_per_node × max_nodes)")
    claim_gpu_memory_mib = QuotaUseSerializer()
    claim_compute_percent = QuotaUseSerializer(help_text="100 = one GPU")

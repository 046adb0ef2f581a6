from django.utils import timezone
from rest_framework import authentication, exceptions

from .models import ApiToken, hash_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer nvke_…`. The token fixes the tenant the request acts in."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        token = (
            ApiToken.objects.select_related("user", "tenant").filter(key_hash=hash_token(header[1])).first()
        )
        if token is None or not token.is_active or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword

import datetime

from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions

from .models import ApiToken, hash_token

LAST_USE_RESOLUTION = datetime.timedelta(minutes=1)  # record a token's use at most once a minute


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer nvke_…`. The token fixes the tenant the request acts in."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        token = active_token(header[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


def active_token(raw: str) -> ApiToken | None:
    """The token `raw` names if it works now (not revoked or expired, its user active), its use
    recorded; else None. The one check of the API and the websockets (nvke/websocket_auth.py)."""
    token = ApiToken.objects.select_related("user", "tenant").filter(key_hash=hash_token(raw)).first()
    if token is None or not token.is_active or not token.user.is_active:
        return None
    record_use(token)
    return token


def record_use(token: ApiToken) -> None:
    """Stamp last_used_at, but write at most once a minute per token: busy automation would otherwise
    turn every read into a row update. The filter makes concurrent requests write once."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USE_RESOLUTION:
        return
    ApiToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USE_RESOLUTION), pk=token.pk
    ).update(last_used_at=now)

import datetime

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import OuterRef, Q, Subquery
from django.db.models.query import get_related_populators
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone
from rest_framework import authentication, exceptions

from nvke import ratelimit
from nvke.addresses import request_address
from nvke.statements import compiled

from .models import ApiToken, Membership, hash_token

LAST_USE_RESOLUTION = datetime.timedelta(minutes=1)  # record a token's use at most once a minute


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer nvke_…`. The token fixes the tenant the request acts in (none, for an
    operator token)."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace").split()
        if not header or header[0] != self.keyword:
            return None
        address = request_address(request)
        check_auth_failures(address)
        token = active_token(header[1]) if len(header) == 2 else None
        if token is None:
            count_auth_failure(address)
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header."
                if len(header) != 2
                else "Invalid, expired or revoked token."
            )
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


def _auth_failures_key(address: str | None) -> str:
    return f"auth-failures:{address or 'unknown'}"


def auth_failures_exceeded(address: str | None) -> bool:
    """Whether the address is past NVKE_RATE_LIMIT_AUTH_FAILURES failed token authentications."""
    limit, _ = ratelimit.parse_rate(settings.NVKE_RATE_LIMIT_AUTH_FAILURES)
    return ratelimit.failures(_auth_failures_key(address))[0] >= limit


def check_auth_failures(address: str | None) -> None:
    """429 while the address is past the limit: a guesser of tokens then costs no token lookup and
    learns nothing until the window ends."""
    if auth_failures_exceeded(address):
        raise exceptions.Throttled(
            wait=ratelimit.parse_rate(settings.NVKE_RATE_LIMIT_AUTH_FAILURES)[1],
            detail="Too many failed authentications from this address.",
        )


def count_auth_failure(address: str | None) -> None:
    window = ratelimit.parse_rate(settings.NVKE_RATE_LIMIT_AUTH_FAILURES)[1]
    ratelimit.add_failure(_auth_failures_key(address), window)


def active_token(raw: str) -> ApiToken | None:
    """The token `raw` names if it works now (not revoked or expired, its user active), its use
    recorded; else None. The one check of the API and the websockets (nvke/websocket_auth.py). It comes
    with its tenant's quota and its user's role there (`member_role`, None when no longer a member), so
    `find_context` needs no query of its own: one round trip less on every request."""
    token = _read_token(hash_token(raw))
    if token is None or not token.is_active or not token.user.is_active:
        return None
    if token.operator and not token.user.is_staff:  # an operator's token ends with their staff flag
        return None
    record_use(token)
    return token


@compiled
def _token_query() -> tuple[str, SQLCompiler]:
    """The token's query with its user, tenant, quota and role, compiled once per process: building and
    compiling it took the ORM ~0.6 ms on every request, running it ~0.1 ms. Its one parameter is the
    key's hash."""
    role = Membership.objects.filter(user_id=OuterRef("user_id"), tenant_id=OuterRef("tenant_id"))
    query = (
        ApiToken.objects.select_related("user", "tenant__quota")
        .annotate(member_role=Subquery(role.order_by().values("role")[:1]))
        .filter(key_hash="")
        .order_by()  # key_hash is unique
        .query
    )
    compiler = query.get_compiler(DEFAULT_DB_ALIAS)
    sql, params = compiler.as_sql()
    assert list(params) == [""], params
    return sql, compiler


def _read_token(key_hash: str) -> ApiToken | None:
    """The token of `key_hash` from the compiled query, its row made into models as the ORM's own
    iteration does (ModelIterable): the token, its related objects, the role annotation."""
    sql, compiler = _token_query()
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(sql, [key_hash])
        rows = cursor.fetchall()
    if not rows:
        return None
    row = next(compiler.results_iter([rows]))  # the backend's converters, as the ORM applies them
    select, klass_info = compiler.select, compiler.klass_info
    first, last = klass_info["select_fields"][0], klass_info["select_fields"][-1]
    token = ApiToken.from_db(
        DEFAULT_DB_ALIAS,
        [column[0].target.attname for column in select[first : last + 1]],
        row[first : last + 1],
    )
    for populator in get_related_populators(klass_info, select, DEFAULT_DB_ALIAS):
        populator.populate(row, token)
    for name, position in compiler.annotation_col_map.items():
        setattr(token, name, row[position])
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

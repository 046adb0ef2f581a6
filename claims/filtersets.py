from claims.models import Claim
from nvke.api.filters import IntegerFilter, StrictFilterSet


class ClaimFilter(StrictFilterSet):
    """Shared by the API list and a cluster's claims page (which shows namespace and status)."""

    cluster = IntegerFilter()
    pool = IntegerFilter()

    class Meta:
        model = Claim
        fields = ["cluster", "pool", "namespace", "status", "kind"]

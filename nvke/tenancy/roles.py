"""What each tenant role may do. One table, read by the API, the UI and the websockets."""

from enum import StrEnum


class Role(StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


class Action(StrEnum):
    VIEW = "view"  # read the tenant's clusters, pools, nodes and GPUs
    CHANGE = "change"  # create, update, scale and delete clusters and node pools
    MANAGE = "manage"  # members, API tokens, audit log


ROLE_ACTIONS: dict[Role, frozenset[Action]] = {
    Role.OWNER: frozenset(Action),
    Role.ADMIN: frozenset(Action),
    Role.MEMBER: frozenset({Action.VIEW, Action.CHANGE}),
    Role.VIEWER: frozenset({Action.VIEW}),
}


def role_allows(role: str, action: Action) -> bool:
    return action in ROLE_ACTIONS.get(Role(role), frozenset())

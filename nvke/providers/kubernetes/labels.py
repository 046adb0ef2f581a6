"""Label selectors as the API writes them (`matchLabels` + `matchExpressions`), matched against labels:
a drain reads which PodDisruptionBudget covers a pod."""


def matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector selects `labels`; an empty selector selects everything (as for PDBs in
    policy/v1), a missing one nothing."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True

"""A tenant's kubeconfig is hostile input: bounded parsing, every node type-checked, and a 400 naming the
field whose message never quotes the document."""

import pytest

pytestmark = pytest.mark.django_db

ATTACH = "/api/v1/clusters/attach/"
ALIAS_BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{','.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
)
GOOD_USER = "users: [{name: u, user: {token: t}}]\n"
GOOD_CONTEXT = "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
GOOD_CLUSTER = "clusters: [{name: k, cluster: {server: 'https://203.0.113.9'}}]\n"


def attach(api, kubeconfig: str):
    return api.post(ATTACH, {"name": "onprem", "kubeconfig": kubeconfig})


def test_an_alias_bomb_is_a_short_400(api, catalog):
    assert len(ALIAS_BOMB) < 600
    response = attach(api, ALIAS_BOMB)
    assert response.status_code == 400
    assert len(response.content) < 1000, "the message quotes nothing of the document"
    body = response.json()
    assert (body["code"], body["details"]["field"]) == ("invalid_kubeconfig", "kubeconfig")
    assert "aliases" in body["message"]


@pytest.mark.parametrize(
    ("kubeconfig", "words"),
    [
        ("contexts: [1, 2]\n", "contexts[0]"),
        ("contexts: abc\n", "contexts is not a list"),
        ("clusters: abc\n" + GOOD_CONTEXT + GOOD_USER, "clusters is not a list"),
        ("contexts: [{name: c, context: [1]}]\n", "contexts[0].context"),
        (GOOD_CONTEXT + GOOD_USER + "clusters: [{name: k, cluster: {server: 5}}]\n", "server"),
        (GOOD_CONTEXT + GOOD_CLUSTER + "users: [{name: u, user: {token: [1]}}]\n", "token"),
        (GOOD_CONTEXT + GOOD_CLUSTER + "users: [{name: u, user: 7}]\n", "users[0].user"),
        ("contexts: [{name: c, context: {cluster: {a: 1}}}]\n", "the context's cluster"),
        ("current-context: [1]\n" + GOOD_CONTEXT, "current-context"),
        ("users: [{name: [x]}]\n" + GOOD_CONTEXT, "users[0]"),
        ("[" * 10_000, "deeper"),
        ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)), "deeper"),
        ("x: " + "y" * 300_000, "larger"),
        ("a: !!python/object/apply:os.system ['id']\n", "not YAML"),
    ],
)
def test_a_malformed_kubeconfig_is_a_400_naming_the_field(api, catalog, kubeconfig, words):
    response = attach(api, kubeconfig)
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert (body["code"], body["details"]["field"]) == ("invalid_kubeconfig", "kubeconfig")
    assert words in body["message"] and len(body["message"]) < 300


@pytest.mark.parametrize(
    ("cluster", "user", "field"),
    [
        ("insecure-skip-tls-verify: true", "", "insecure-skip-tls-verify,"),
        ("proxy-url: 'http://203.0.113.10:3128'", "", "proxy-url,"),
        ("tls-server-name: api.internal", "", "tls-server-name,"),
        ("", "as: system:admin", "as (impersonation)"),
        ("", "as-groups: [system:masters]", "as-groups (impersonation)"),
        ("", "as-uid: '0'", "as-uid (impersonation)"),
        ("", "as-user-extra: {scopes: [all]}", "as-user-extra (impersonation)"),
    ],
)
def test_a_setting_nvke_does_not_honour_is_a_400_naming_it_not_dropped(api, catalog, cluster, user, field):
    """They were dropped: NVKE then verified a certificate the tenant told it to skip, bypassed the proxy
    it named, or acted as the token's own identity rather than the one it impersonates."""
    text = (
        GOOD_CONTEXT
        + f"clusters: [{{name: k, cluster: {{server: 'https://203.0.113.9', {cluster}}}}}]\n"
        + f"users: [{{name: u, user: {{token: t, {user}}}}}]\n"
    )
    response = attach(api, text)
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert (body["code"], body["details"]["field"]) == ("invalid_kubeconfig", "kubeconfig")
    assert f"sets {field}" in body["message"] and "which NVKE does not honour" in body["message"]

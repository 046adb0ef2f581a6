"""The embedded default's demo accounts (seeded by `seed_demo`, listed on the sign-in page): the two sides
of the product, a tenant's owner, who sees only the tenant's clusters, and the platform's operator
(staff: the admin, fleet rollouts), who belongs to no tenant."""

DEMO_USER, DEMO_PASSWORD = "demo", "nvke-demo"
OPERATOR_USER, OPERATOR_PASSWORD = "operator", "nvke-operator"
ACCOUNTS = (
    (DEMO_USER, DEMO_PASSWORD, "owner of the Demo tenant: its clusters, pools and claims"),
    (OPERATOR_USER, OPERATOR_PASSWORD, "the platform's operator: the admin, fleet rollouts, every tenant"),
)

"""The web UI's views, one module per resource; `shared` holds what several of them use. Thin: parse
the form, check the role, call a service (writes) or read through the tenant-restricted querysets, then
render or redirect. Another tenant's object is a 404."""

"""Documents encoded before the renderer runs (`nvke.api.documents.encode`), for reads whose DRF walk and
`json.dumps` cost most of the request (`nodes/`: a page of 20 nodes is 160 GPUs and ~900 shares;
`claims/`). The view puts a `WrittenJSON` in the response's data (the whole document, or a page's
`results`) and `JSONRenderer` puts its bytes in the body as they are. They are what DRF's JSONRenderer
gives for the same value, byte for byte (compact, UTF-8 unescaped, U+2028/U+2029 escaped:
tests/nvke/api/test_read_documents.py and tests/claims/test_claim_document.py hold the documents to
that); anything else that reads the data (the browsable API, an indented rendering, tests reading
`response.data`) gets the parsed value."""

import json

from rest_framework import renderers


class WrittenJSON:
    """Encoded JSON standing for its value: read like the value (parsed on first use), rendered as is."""

    __slots__ = ("body", "_value")

    def __init__(self, body: bytes):
        self.body = body
        self._value = None

    @property
    def value(self):
        if self._value is None:
            self._value = json.loads(self.body)
        return self._value

    def __getitem__(self, key):
        return self.value[key]

    def __iter__(self):
        return iter(self.value)

    def __len__(self) -> int:
        return len(self.value)

    def __contains__(self, item) -> bool:
        return item in self.value

    def __eq__(self, other) -> bool:
        return self.value == (other.value if isinstance(other, WrittenJSON) else other)

    __hash__ = None

    def get(self, key, default=None):
        return self.value.get(key, default)

    def keys(self):
        return self.value.keys()

    def items(self):
        return self.value.items()

    def values(self):
        return self.value.values()

    def __repr__(self) -> str:
        return f"WrittenJSON({self.body[:60]!r}...)"


class JSONRenderer(renderers.JSONRenderer):
    """DRF's, putting a `WrittenJSON` (the data, or the last value of a dict: a page's `results`) in the
    body as it is. An indented or spaced rendering, or one escaping non-ASCII, parses it and renders the
    value."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        as_is = (  # the body is encoded compact, UTF-8 unescaped
            self.compact
            and self.ensure_ascii is False
            and self.get_indent(accepted_media_type, renderer_context or {}) is None
        )
        if isinstance(data, WrittenJSON):
            return data.body if as_is else super().render(data.value, accepted_media_type, renderer_context)
        if (
            isinstance(data, dict)
            and data
            and isinstance(written := data[last := next(reversed(data))], WrittenJSON)
        ):
            if not as_is:
                return super().render({**data, last: written.value}, accepted_media_type, renderer_context)
            head = super().render({**data, last: []}, accepted_media_type, renderer_context)
            assert head.endswith(b"[]}")
            return head[:-3] + written.body + b"}"
        return super().render(data, accepted_media_type, renderer_context)

"""YAML from someone else, parsed within bounds: no anchors or aliases (a 459-byte alias bomb expands to
tens of megabytes), a size and a nesting depth limit, and errors whose text never quotes the document
(PyYAML's own messages carry a repr of the data around the fault, which an alias bomb makes huge)."""

from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32


class BoundedYamlError(ValueError):
    """Why the text was refused, in a message that quotes none of it."""


class _Loader(yaml.SafeLoader):
    """SafeLoader's types, without anchors and aliases, and no deeper than MAX_DEPTH."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, AliasEvent) or (
            isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None
        ):
            raise BoundedYamlError(f"anchors and aliases are not accepted (line {event.start_mark.line + 1})")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise BoundedYamlError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load(text: str) -> Any:
    """The one document in `text`, as SafeLoader builds it; BoundedYamlError says why not."""
    if len(text.encode()) > MAX_BYTES:
        raise BoundedYamlError(f"larger than {MAX_BYTES // 1024} KiB")
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        line = f" (line {error.problem_mark.line + 1})" if error.problem_mark else ""
        # problem is PyYAML's fixed wording (e.g. "found unexpected end of stream"), cut short all the same
        raise BoundedYamlError(f"not YAML: {(error.problem or 'malformed')[:80]}{line}") from None
    except yaml.YAMLError:
        raise BoundedYamlError("not YAML") from None
    finally:
        loader.dispose()

"""OPTIONS answers: DRF's, without the form descriptions it builds from a view's serializer. Views
without one (the defrag and agent-manifest actions) made DRF fail with a 500; the schema
(/api/schema/) describes every request body anyway."""

from rest_framework.metadata import SimpleMetadata


class Metadata(SimpleMetadata):
    def determine_actions(self, request, view) -> dict:
        return {}

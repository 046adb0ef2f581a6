from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """Page numbers; `page_size` up to 500. A page_size that is no whole number from 1 to 500, or a page
    that is no whole number from 1, is a 400 naming it (DRF falls back to the default in silence, so
    `page_size=null` and `page=` looked like they worked); a page past the last stays DRF's 404."""

    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdecimal()) or not 1 <= int(raw) <= self.max_page_size:
            raise ValidationError(
                {self.page_size_query_param: [f"Give a whole number from 1 to {self.max_page_size}."]}
            )
        return int(raw)

    def get_page_number(self, request, paginator) -> str:
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and (not (raw.isascii() and raw.isdecimal()) or int(raw) < 1):
            raise ValidationError({self.page_query_param: ["Give a whole number from 1."]})
        return super().get_page_number(request, paginator)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.page_query_param: {"minimum": 1},
            self.page_size_query_param: {
                "minimum": 1,
                "maximum": self.max_page_size,
                "default": self.page_size,
            },
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters


class NodePagination(Pagination):
    """`nodes/`: 20 to a page by default, as each node carries its GPUs and their shares (a page of 50
    was ~8 times the bytes of another list's); `page_size` still goes up to 500."""

    page_size = 20

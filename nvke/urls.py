from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from telemetry.prometheus import metrics_view


def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


# Unmatched /api/ URLs (and failures outside DRF) answer in the API's {code, message, details} shape.
handler400 = "nvke.api.errors.bad_request"
handler404 = "nvke.api.errors.page_not_found"
handler500 = "nvke.api.errors.server_error"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("nvke.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("frontend.urls")),
]

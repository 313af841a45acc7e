from django.contrib import admin
from django.urls import path
from django.views.generic import TemplateView

from conversations.api import assets_router, calls_router, router
from conversations.api_base import api, openapi_json
from conversations.api_host import host_router
from conversations.api_runs import launches_router, runs_router
from conversations.health import healthz, readyz

api.add_router("/", router)
api.add_router("/", calls_router)
api.add_router("/", assets_router)
api.add_router("/", runs_router)
api.add_router("/", launches_router)
api.add_router("/", host_router)

urlpatterns = [
    path("", TemplateView.as_view(template_name="index.html"), name="home"),
    path("admin/", admin.site.urls),
    path("api/v1/openapi.json", openapi_json),  # before ninja's own view: compact JSON
    path("api/v1/", api.urls),
    path("healthz", healthz),
    path("readyz", readyz),
]

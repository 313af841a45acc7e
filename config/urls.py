from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from conversations.api.assets import assets_router
from conversations.api.base import api, openapi_json
from conversations.api.calls import calls_router
from conversations.api.conversations import router
from conversations.api.health import healthz, readyz
from conversations.web import conversation_list, conversation_page, favicon, workbench_page
from tools.runtime.async_runs.api import runs_router
from tools.runtime.host.api import host_router
from tools.runtime.launches.api import launches_router

# The core's routers, then the runtime's (tools/runtime/): the order of the OpenAPI document.
api.add_router("/", router)
api.add_router("/", calls_router)
api.add_router("/", assets_router)
api.add_router("/", runs_router)
api.add_router("/", launches_router)
api.add_router("/", host_router)

urlpatterns = [
    # The web pages (docs/web.md); login through Django's auth views.
    path("", conversation_list, name="home"),
    path("c/<uuid:conversation_id>/", conversation_page, name="conversation"),
    path("workbench/", workbench_page, name="workbench"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/openapi.json", openapi_json),  # before ninja's own view: compact JSON
    path("api/v1/", api.urls),
    path("favicon.ico", favicon),
    path("healthz", healthz),
    path("readyz", readyz),
]

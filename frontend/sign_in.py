"""The sign-in page, which says plainly when too many failed attempts have locked an address out."""

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpResponse

from nvke.tenancy.demo import ACCOUNTS
from nvke.tenancy.login_throttle import refused_for


class SignInView(auth_views.LoginView):
    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        # The embedded default's seeded accounts, said where a first-time user needs them.
        return {**super().get_context_data(**kwargs), "demo_accounts": ACCOUNTS if settings.EMBEDDED else ()}

    def post(self, request, *args, **kwargs) -> HttpResponse:
        wait = refused_for(request, request.POST.get("username", ""))
        if wait is None:
            return super().post(request, *args, **kwargs)
        # Unbound: validating would check the password, which is exactly what is refused now.
        form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")})
        form.cleaned_data = {}  # what add_error expects of a form that was cleaned
        minutes = -(-wait // 60)
        form.add_error(None, f"Too many failed sign-ins from this address. Try again in {minutes} minutes.")
        response = self.render_to_response(self.get_context_data(form=form), status=429)
        response["Retry-After"] = str(wait)
        return response

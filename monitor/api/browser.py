"""What a browser brings to the pages under `/ui`: a session cookie, and an Origin on its POSTs.

Every page route that changes something (the sign-in form, a button that POSTs) goes through
`Browser.page_post`: the POST must come from this site (its `Origin`, else `Sec-Fetch-Site`,
names this site's host, or RAGMON_EXPLORER_URL's), its form body is read within
`FORM_MAX_BYTES` and RAGMON_BODY_TIMEOUT_S, and the caller must hold a session. A cross-site
form (another site's page submitting to ragmon in a signed-in browser, or signing it in with
the attacker's key) is refused `403` before the body is read. A request with neither header
does not come from a browser (curl, a script) and cannot carry a cross-site form.

The session cookie holds a reference to the key (`KeyRing.session`), never the key itself.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from fastapi import Request, Response

from ragmon.api.auth import KeyRing, Principal
from ragmon.api.bodies import read_body
from ragmon.api.service import Refused
from ragmon.settings import Settings

COOKIE = "ragmon_session"
SESSION_S = 12 * 3600
FORM_MAX_BYTES = 8192
FORM_MAX_FIELDS = 100
SAME_SITE = ("same-origin", "none")  # Sec-Fetch-Site values of a page of this site, or typed


class Browser:
    """Sessions and same-origin checks of the `/ui` pages (one per app)."""

    def __init__(self, settings: Settings, keys: KeyRing) -> None:
        self.keys = keys
        public = urlsplit(settings.explorer_url).netloc if settings.explorer_url else ""
        self.hosts = {public.lower()} if public else set()

    def principal(self, request: Request) -> Principal | None:
        """Who is signed in (anyone when API keys are off); None without a live session."""
        if not self.keys.enabled:
            return Principal(None)
        return self.keys.from_session(request.cookies.get(COOKIE))

    def cross_site(self, request: Request) -> str | None:
        """Why a POST is not from this site, or None when it is."""
        origin = request.headers.get("origin")
        if origin is not None:
            host = urlsplit(origin).netloc.lower() if origin.isascii() else ""
            if host and (host == request.headers.get("host", "").lower() or host in self.hosts):
                return None
            return f"Origin {origin[:100]!r} is not this site"
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in SAME_SITE:
            return f"Sec-Fetch-Site is {site[:30]!r}"
        return None

    async def form(self, request: Request) -> dict[str, str]:
        """A form POSTed from one of this site's pages (else `403`), read within its limits
        (else `413`, or `408` when it stops arriving): the first value of each field."""
        why = self.cross_site(request)
        if why is not None:
            raise Refused(403, None, f"cross-site request refused: {why}")
        body = await read_body(request, FORM_MAX_BYTES, counted=False)
        try:
            fields = parse_qs(body.decode(errors="replace"), max_num_fields=FORM_MAX_FIELDS)
        except ValueError:
            raise Refused(400, None, f"form over {FORM_MAX_FIELDS} fields") from None
        return {name: values[0] for name, values in fields.items()}

    async def page_post(self, request: Request) -> tuple[Principal, dict[str, str]]:
        """What a page route that changes something calls first: the form (as `form`) and the
        signed-in principal (`401` without a session)."""
        fields = await self.form(request)
        principal = self.principal(request)
        if principal is None:
            raise Refused(401, None, "not signed in: sign in at /ui/login")
        return principal, fields

    def sign_in(self, request: Request, response: Response, key: str) -> bool:
        """Set a session cookie for `key` on `response`; False when the key is refused."""
        if not self.keys.enabled:
            return True
        session = self.keys.session(key, SESSION_S)
        if session is None:
            return False
        response.set_cookie(
            COOKIE, session, max_age=SESSION_S, path="/ui", httponly=True, samesite="strict",
            secure=request.url.scheme == "https",
        )  # fmt: skip
        return True

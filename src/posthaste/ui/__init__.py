"""The dashboard at ``/ui``: server-rendered pages over the same services as the API.

A user signs in with a ``full_access`` API key; the key travels in an encrypted, HttpOnly,
SameSite=Strict session cookie, and every form carries a CSRF token derived from that cookie.
Every lookup goes through the services with the signed-in key's principal, so a team sees only
its own resources, exactly as through the API.
"""

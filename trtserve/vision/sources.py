"""Where a client's image comes from: a data: URL (or bare base64), or an http(s) URL, which a server
fetches only from the domains its operator allows (`trtserve run --allowed-media-domains`): a server must
not fetch arbitrary URLs on a client's behalf."""

from __future__ import annotations

import base64
import binascii
import urllib.request
from urllib.parse import urlparse

from trtserve.engine.errors import UserError
from trtserve.vision.limits import ImageLimits

FLAG = "--allowed-media-domains"
MEDIA_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/webp")
FETCH_TIMEOUT_S = 10.0


def b64_bytes(data: str, limits: ImageLimits) -> bytes:
    """Base64 text -> bytes; UserError where it is not base64 or decodes past the byte limit."""
    limits.check_bytes(len(data) * 3 // 4)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise UserError("the image's base64 data is malformed; send the file's bytes base64-encoded") from None


def url_bytes(url: str, limits: ImageLimits, allowed_domains: frozenset[str]) -> bytes:
    """An image_url's bytes: a data: URL's payload, or an allowed domain's http(s) file (blocking)."""
    if url.startswith("data:"):
        head, sep, payload = url[5:].partition(",")
        media, _, encoding = head.partition(";")
        if not sep or encoding != "base64":
            raise UserError("an image data: URL must be data:image/<png|jpeg|webp>;base64,<data>")
        if media and media.lower() not in MEDIA_TYPES:
            raise UserError(f"images of type {media} are not supported; send PNG, JPEG or WebP")
        return b64_bytes(payload, limits)
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise UserError("an image URL must be a data: URL (or an http(s) URL of an allowed domain)")
    host = (parsed.hostname or "").lower()
    if not allowed_domains:
        raise UserError(
            f"this server does not fetch image URLs ({parsed.scheme}://{host}); send the image as a data: URL, "
            f"or start the server with {FLAG} naming the domains it may fetch from"
        )
    if host not in allowed_domains:
        raise UserError(
            f"image URLs from {host} are not allowed; this server fetches from {', '.join(sorted(allowed_domains))} ({FLAG})"
        )
    return _fetch(url, limits)


def _fetch(url: str, limits: ImageLimits) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as resp:  # noqa: S310 (the domain is allowed)
            data = resp.read(limits.max_bytes + 1)
    except OSError as err:
        raise UserError(f"the image URL could not be fetched ({err}); check it or send a data: URL") from None
    limits.check_bytes(len(data))
    return data

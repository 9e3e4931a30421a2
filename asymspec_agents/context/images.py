"""Images handed in by callers: data URLs decoded, every image checked with Pillow before anything reads it.

An image comes as raw bytes, a local path, or (from the front doors: the server's `image_url` parts, LangChain's
image blocks, LlamaIndex's `ImageBlock`s) a base64 data URL. Nothing is fetched: an http(s) URL is refused with a
message saying to send the image's bytes. What the models read of an image is its stand-in text (render.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from pathlib import Path

from ..errors import InvalidMessageError
from .cache import LRUCache
from .messages import ImageItem

MAX_IMAGE_BYTES = 20 << 20  # OpenAI's limit per image
MAX_IMAGE_PIXELS = 50_000_000  # beyond this an image is a decompression bomb, not a screenshot
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")
_CHECKED = LRUCache(1024)  # digests of images already read whole: a screenshot carried for ten turns is checked once
DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,(?P<data>.*)", re.DOTALL)


def image_from_url(url, where: str, caption: str | None = None) -> ImageItem:
    """An ImageItem from a base64 data URL (`data:image/png;base64,...`); InvalidMessageError for anything else,
    saying what to send instead. `where` names the image in messages ("Message 2: image 1")."""
    if not isinstance(url, str) or not url:
        raise InvalidMessageError(f"{where}: an image URL must be a non-empty string, got {type(url).__name__}.")
    if re.match(r"https?://", url, re.IGNORECASE):
        raise InvalidMessageError(f"{where}: {url[:60]!r} is a remote URL; nothing here fetches images. Send the "
                                  "image itself as a data URL (data:image/png;base64,...) or as base64 data.")
    match = DATA_URL.fullmatch(url.strip())
    if match is None:
        raise InvalidMessageError(f"{where}: {url[:40]!r}... is not a base64 data URL; send "
                                  "data:image/png;base64,... (or the image's base64 data).")
    return ImageItem(decode_base64(match["data"], where), caption)


def decode_base64(data, where: str) -> bytes:
    """The bytes of base64 `data` (whitespace allowed, padding too); InvalidMessageError if it is not base64."""
    if not isinstance(data, (str, bytes)) or not data:
        raise InvalidMessageError(f"{where}: image data must be a non-empty base64 string.")
    try:
        return base64.b64decode(re.sub(rb"\s+", b"", data.encode() if isinstance(data, str) else data), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidMessageError(f"{where}: the image data is not valid base64 ({exc}).") from None


def image_bytes(image: ImageItem, where: str) -> bytes:
    """The bytes of an image given as bytes or a local path; InvalidMessageError for a missing file."""
    data = image.data_or_path
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file():
            raise InvalidMessageError(f"{where}: no image file at {str(path)[:120]!r}; pass the image's bytes or "
                                      "the path of a file that exists.")
        if path.stat().st_size > MAX_IMAGE_BYTES:
            raise _too_large(where, path.stat().st_size)
        return path.read_bytes()
    raise InvalidMessageError(f"{where}: an image is bytes or a file path, got {type(data).__name__}.")


def check_image(image: ImageItem, where: str) -> None:
    """Raise InvalidMessageError unless `image` is a PNG, JPEG, GIF, WebP or BMP image Pillow can read, of at most
    MAX_IMAGE_BYTES and MAX_IMAGE_PIXELS."""
    data = image_bytes(image, where)
    if len(data) > MAX_IMAGE_BYTES:
        raise _too_large(where, len(data))
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    if digest not in _CHECKED:  # an image that failed is read (and refused) again each time
        _read(data, where)
        _CHECKED.put(digest, True)


def _read(data: bytes, where: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as opened:
            kind, (width, height) = opened.format, opened.size
            if width * height <= MAX_IMAGE_PIXELS:
                opened.verify()  # reads the whole file: a truncated or corrupt image fails here
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidMessageError(f"{where}: not an image that can be read ({exc}); send PNG, JPEG, GIF, WebP or "
                                  "BMP data.") from None
    if width * height > MAX_IMAGE_PIXELS:
        raise InvalidMessageError(f"{where}: the image has {width}x{height} pixels, more than the "
                                  f"{MAX_IMAGE_PIXELS:,} read here; send a smaller one.")
    if kind not in FORMATS:
        raise InvalidMessageError(f"{where}: {kind} images are not read here; send {', '.join(FORMATS)}.")


def _too_large(where: str, size: int) -> InvalidMessageError:
    return InvalidMessageError(f"{where}: the image has {size:,} bytes, more than the {MAX_IMAGE_BYTES:,} read "
                               "here; send a smaller one.")

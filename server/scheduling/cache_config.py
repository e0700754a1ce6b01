"""tritonserver's response cache flags, read as tritonserver 2.51 reads them:

    --cache-config <cache>,<setting>=<value>   repeatable: the settings of one cache, e.g. local,size=1048576
    --response-cache-byte-size <bytes>         deprecated: the same as --cache-config local,size=<bytes>

tcli has Triton's `local` cache (in memory, `server/scheduling/response_cache.py`); `redis` and
custom cache libraries are refused with the fix. Messages that Triton has are Triton's words, with
the fix added; each is one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_EXAMPLE = "e.g. --cache-config local,size=1048576"


class CacheConfigError(ValueError):
    """A cache flag tcli cannot take; the message is the one line to show."""


@dataclass(frozen=True)
class CacheFlags:
    size: int  # bytes of the local cache
    ignored: list[str] = field(default_factory=list)  # settings the local cache does not read
    deprecated_flag: bool = False  # given as --response-cache-byte-size


def _setting(value: str) -> tuple[str, str, str]:
    cache, comma, setting = value.partition(",")
    if not comma or not cache:
        raise CacheConfigError(
            "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. "
            f"Got {value} ({_EXAMPLE})"
        )
    key, equals, item = setting.partition("=")
    if not equals or not key:
        raise CacheConfigError(
            f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {value} ({_EXAMPLE})"
        )
    return cache, key, item


def _size(text: str, flag: str) -> int:
    try:
        size = int(text.strip())
    except ValueError:
        size = -1
    if size <= 0:
        raise CacheConfigError(
            f"{flag}: the cache size must be a whole number of bytes above 0, got '{text}'"
        )
    return size


def parse_cache_flags(cache_config: list[str], response_cache_byte_size: str | None) -> CacheFlags | None:
    """The local cache the flags ask for, or None without either flag. Raises CacheConfigError."""
    if cache_config and response_cache_byte_size is not None:
        raise CacheConfigError(
            "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other."
        )
    if response_cache_byte_size is not None:
        return CacheFlags(_size(response_cache_byte_size, "--response-cache-byte-size"), deprecated_flag=True)
    if not cache_config:
        return None
    settings: dict[str, dict[str, str]] = {}
    for value in cache_config:
        cache, key, item = _setting(value)
        settings.setdefault(cache, {})[key] = item  # a repeated setting: the last one counts
    if len(settings) > 1:
        raise CacheConfigError(
            "found multiple cache configurations, but only a single cache is currently supported "
            f"(got {', '.join(settings)}; give the settings of one cache)"
        )
    ((cache, values),) = settings.items()
    if cache != "local":
        raise CacheConfigError(
            f"--cache-config {cache},...: tcli has only Triton's 'local' cache (in the server's memory); "
            "use --cache-config local,size=<bytes>"
        )
    if "size" not in values:
        raise CacheConfigError(
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field. "
            "Give it in bytes: --cache-config local,size=1048576"
        )
    size = _size(values["size"], f"--cache-config local,size={values['size']}")
    return CacheFlags(size, ignored=sorted(key for key in values if key != "size"))

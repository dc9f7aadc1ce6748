"""Secret redaction for stored tool payloads.

Tool results and arguments can carry credentials (an ``env`` dump, a config file, an HTTP
trace). Payloads are redacted before they are stored for replay; token counts are still
computed on the original text, so redaction never changes what a call is said to cost.

What is redacted (the ``<kind>`` of each built-in pattern)
==========================================================

=====================  ===================================================================
kind                   what it matches
=====================  ===================================================================
``private_key``        ``-----BEGIN … PRIVATE KEY-----`` through ``-----END … PRIVATE KEY-----``
                       (RSA, EC, OPENSSH, ENCRYPTED, PGP ``… KEY BLOCK``; multi-line or
                       ``\\n``-escaped in JSON; a block cut off before its END line, as in a
                       capped payload, up to the end of its base64 lines), and the base64 of
                       such a block (``LS0tLS1CRUdJTi…``: kubeconfig ``client-key-data``, a
                       TLS Secret's ``tls.key``; base64 certificates are left alone)
``bearer_token``       the token in ``Authorization: Bearer …`` headers and
                       ``"authorization": "Bearer …"`` JSON (also escaped inside a JSON
                       string, ``Proxy-Authorization``, and GitHub's ``Authorization: token …``)
``basic_auth``         the credentials in ``Authorization: Basic …``
``aws_secret_key``     a 40-character value labelled ``aws_secret_access_key``,
                       ``SecretAccessKey``, ``secret_access_key``, ``aws_secret_key``…
``anthropic_key``      ``sk-ant-api03-…``, ``sk-ant-admin01-…``, ``sk-ant-oat01-…`` (32+ after)
``openai_key``         ``sk-proj-…``, ``sk-svcacct-…``, ``sk-admin-…``, ``sk-None-…`` (20+ after),
                       legacy ``sk-`` + 32+ alphanumerics, ``sk-or-v1-`` + hex (OpenAI-style)
``aws_access_key_id``  ``AKIA``/``ASIA`` + 16 base32 characters
``github_token``       ``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_`` + 36+, ``github_pat_`` + 40+
``gitlab_token``       ``glpat-``, ``gldt-``, ``glrt-``, ``glptt-`` + 20+ (routable ``.01.`` forms too)
``slack_webhook``      the secret path of ``https://hooks.slack.com/services/T…/B…/…``
``slack_token``        ``xoxa-``, ``xoxb-``, ``xoxp-``, ``xoxr-``, ``xoxs-``, ``xoxe-`` tokens
``stripe_key``         ``sk_live_``, ``rk_live_``, ``sk_test_``, ``rk_test_`` + 20+
``google_api_key``     ``AIza`` + 35
``jwt``                ``eyJ….eyJ….sig``: three base64url segments whose first two are JSON
``url_password``       the password in ``scheme://user:password@host`` (user and host stay)
``password``           the value of a key ending in ``password``, ``passwd``, ``passphrase``
``secret``             the value of a key ending in ``secret``, ``secret_key``, ``secretKey``
``api_key``            the value of a key ending in ``api_key``, ``apikey``, ``api-key``
``token``              the value of a key ending in ``token`` (``access_token``, ``GITHUB_TOKEN``)
=====================  ===================================================================

The last four ("assignments") read ``"key": "value"`` (JSON, single quotes, and ``\\"``
escaped inside a JSON string), ``key=value``, ``key: value`` and ``key = "value"``; the key
is case-insensitive and only the value is redacted. To leave ordinary tool output alone:

* only *string* values: ``"input_tokens": 123`` and ``"secret": true`` are not secrets;
* the key must *end* with the word: ``max_tokens``, ``token_type``, ``secretName``,
  ``tokenizer`` are not credentials; nor are pagination cursors (``next_token``,
  ``pageToken``…) or tokenizer vocabulary (``eos_token``, ``pad_token``…);
* a bare value needs a letter, a digit and 4+ characters, so code (``token = token``,
  ``password = get_password()``) and YAML names (``secret: kube-system``) stay;
* a quoted ``password`` value needs 3+ characters (spaces allowed: passphrases); a quoted
  ``secret``/``api_key``/``token`` value needs 8+ characters without spaces, a digit (or
  16+ characters of mixed case), and must not be a lowercase dashed name: in Prometheus
  and Kubernetes output ``secret="default-token-m7wjs"`` names a Secret, and
  ``{"token": "Programming"}`` is a logprob;
* placeholders stay: ``${VAR}``, ``$VAR``, ``{{ var }}``, ``%(var)s``, ``<token>``, ``****``,
  ``null``/``none``/``true``/``false``, and what is already redacted (``[REDACTED…`` or a
  ``*`` mask), so redacting twice changes nothing.

Prefixed tokens must not follow a letter or digit (``task-…`` is not ``sk-…``), and each has
a minimum length. Kubernetes uids, sha256 image digests and base64 config blobs match none
of the patterns. On the real tool outputs in ``../shared/realworld/payloads`` (8,016-line pod
log, pod JSON, Prometheus rules and series, GitHub API JSON and pages, AWS docs) the only
hits are the five ``"authorization": "token …"`` headers of octokit's recorded GitHub
requests (see ``tests/collector/test_redact.py``).

Placeholders, and offsets
=========================

:meth:`Redactor.redact_bytes` and :meth:`Redactor.redact_text` replace each secret with
``[REDACTED:<kind>]`` (e.g. ``[REDACTED:openai_key]``) so a reader knows what was there.
That changes the length of the payload: every byte offset after the first secret moves,
while retained ranges (the head/tail byte offsets kept for a capped payload) refer to the
*original* bytes. :meth:`Redactor.redact_bytes_same_length` therefore replaces each secret
with a mask of exactly its byte length: the tag padded with ``*``
(``[REDACTED:openai_key]*****…``), or all ``*`` when the tag is longer than the secret
(``hunter2`` -> ``*******``). The length, the offsets and the bytes around each secret are
unchanged; the collector uses this variant for stored payloads. :meth:`Redactor.find`
returns the secrets' ``(start, end, kind)`` byte ranges in the original.

Configuration
=============

``Redactor(extra_patterns={"name": "regex"}, builtins=True)``: an extra pattern is a Python
regular expression over the payload *bytes* (UTF-8; add ``(?i)`` for case-insensitive);
the whole match is redacted, or only its group named ``secret`` if it has one; ``name`` is
the ``<kind>`` of the placeholder (letters, digits, ``_ . -``). On the same bytes a built-in
pattern wins. A bad regex raises :class:`~collector.errors.ConfigError` naming the pattern
and the regex error. Each extra pattern is one more ``re`` pass over every payload.

:meth:`Redactor.from_env` reads:

==============================  ==========================================================
``TOOLMETER_REDACT``            ``off`` (or ``false``/``0``/``no``): store payloads as they
                                are, extra patterns included; ``on`` (default) redacts
``TOOLMETER_REDACT_PATTERNS``   extra patterns as a JSON object of name -> regex, e.g.
                                ``{"acme_key": "acme_[0-9a-f]{32}"}``
==============================  ==========================================================

Speed
=====

Python's ``re`` costs about a millisecond per pattern per MB, so a payload of 64 KiB or more
is first screened in one pass of RE2 (``pyarrow.compute.match_substring_regex``, which
releases the GIL) with the union of every pattern's *prefilter*: a looser RE2 pattern that
matches wherever its rule can (``sk-[A-Za-z0-9_-]{20}``, ``(?i:password)…[:=]``…). No match:
no built-in can match, done. A match: the full scan. Extra patterns always scan. The small
payloads of a batch (:meth:`Redactor.redact_many_same_length`) are screened the same way, all
in one call: RE2 compiles the union once a call (about 2 ms), which a single small payload
would not repay, while a batch's pay it back many times (~3 µs a KB payload instead of ~20).
``python benchmarks/bench_redact.py [FILE]`` times the screen against the full scan.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple

from collector.config import REDACT_ENV, REDACT_PATTERNS_ENV
from collector.errors import ConfigError
from collector.measure.secret_rules import BUILTIN_RULES, Rule

__all__ = ["ENV_PATTERNS", "ENV_SWITCH", "Redactor", "Secret"]

ENV_SWITCH: Final = REDACT_ENV
ENV_PATTERNS: Final = REDACT_PATTERNS_ENV

PREFILTER_MIN_BYTES = 64 * 1024
"""Payloads this large are first screened in one RE2 pass (smaller ones: not worth a call)."""

SCREEN_MIN_PAYLOADS = 64
"""Small payloads redacted together are screened in one RE2 call when at least this many."""
SCREEN_CHUNK = 4096
"""...and at most this many a call (measured: ~3 µs a KB payload in calls of 1,000-4,000, ~7 µs in
one of 20,000)."""

_OFF: Final = frozenset({"off", "false", "0", "no"})
_ON: Final = frozenset({"on", "true", "1", "yes", ""})
_KIND_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_ALNUM: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


class Secret(NamedTuple):
    """One secret found: byte offsets ``[start, end)`` in the original payload, and its kind."""

    start: int
    end: int
    kind: str


# ---------------------------------------------------------------- the one-pass screen


class _Prefilter:
    """One RE2 pass (``pyarrow.compute``, which releases the GIL) over the union of the rules'
    prefilters: when nothing matches, no built-in rule can match and the payload is clean.

    Built on first use (pyarrow.compute takes ~50 ms to import); if pyarrow or its RE2 is
    missing, every payload takes the full scan instead.
    """

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.pattern = "|".join(f"(?:{r.prefilter})" for r in rules if r.prefilter is not None)
        self.complete = all(r.prefilter is not None for r in rules)
        self._lock = threading.Lock()
        self._fn: Callable[[bytes], bool] | None = None
        self._failed = False

    def could_match(self, data: bytes) -> bool:
        """False only when no rule can match ``data``."""
        if not self.complete or self._failed:
            return True
        fn = self._fn or self._build()
        return True if fn is None else fn(data)

    def could_match_each(self, datas: Sequence[bytes]) -> list[bool] | None:
        """:meth:`could_match` of each of ``datas``, in one RE2 call; None when it cannot tell."""
        if not self.complete or self._failed or (self._fn is None and self._build() is None):
            return None
        import pyarrow as pa
        import pyarrow.compute as pc

        flags: list[bool] = []
        for start in range(0, len(datas), SCREEN_CHUNK):  # far larger arrays screen slower a payload
            part = pa.array(datas[start : start + SCREEN_CHUNK], type=pa.large_binary())
            flags += pc.match_substring_regex(part, pattern=self.pattern).to_pylist()
        return flags

    def _build(self) -> Callable[[bytes], bool] | None:
        with self._lock:
            if self._fn is not None or self._failed:
                return self._fn
            try:
                import pyarrow as pa
                import pyarrow.compute as pc

                options = pc.MatchSubstringOptions(self.pattern)

                def matches(data: bytes) -> bool:
                    offsets = pa.py_buffer(struct.pack("<qq", 0, len(data)))
                    array = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])
                    return bool(pc.match_substring_regex(array, options=options)[0].as_py())

                matches(b"check: RE2 accepts the pattern")  # (it is compiled on every call: ~0.3 ms)
            except Exception:  # no pyarrow, no RE2, or a pattern RE2 refuses: scan everything
                self._failed = True
                return None
            self._fn = matches
            return matches


# ---------------------------------------------------------------- the redactor


def _secret_span(m: re.Match[bytes], names: tuple[str, ...]) -> tuple[int, int]:
    """The bytes to redact: the first group of ``names`` that took part, else the whole match."""
    groups = m.re.groupindex
    for name in names:
        if name in groups and m.start(name) >= 0:
            return m.span(name)
    return m.span()


def _mask(kind: str, length: int) -> bytes:
    tag = f"[REDACTED:{kind}]".encode()
    if len(tag) > length:
        return b"*" * length
    return tag + b"*" * (length - len(tag))


class Redactor:
    """Finds secrets in payload bytes and replaces them. Thread-safe: build once, reuse.

    ``extra_patterns`` maps a kind name to a regex (see the module docstring); ``builtins``
    turns the built-in patterns on or off. :meth:`redact_bytes` and :meth:`redact_text`
    change byte offsets after the first secret (retained ranges refer to the original);
    :meth:`redact_bytes_same_length` keeps every offset.
    """

    def __init__(self, extra_patterns: Mapping[str, str] | None = None, builtins: bool = True) -> None:
        self._builtin: tuple[Rule, ...] = BUILTIN_RULES if builtins else ()
        self._extra: tuple[Rule, ...] = tuple(_compile_extra(k, v) for k, v in (extra_patterns or {}).items())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        """Build from ``TOOLMETER_REDACT`` and ``TOOLMETER_REDACT_PATTERNS`` (``os.environ`` by default)."""
        env = os.environ if environ is None else environ
        switch = env.get(ENV_SWITCH, "").strip().lower()
        if switch in _OFF:
            return cls(builtins=False)
        if switch not in _ON:
            raise ConfigError(f"{ENV_SWITCH}={env[ENV_SWITCH]!r} must be 'on' or 'off'")
        text = env.get(ENV_PATTERNS, "").strip()
        if not text:
            return cls()
        try:
            extra = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{ENV_PATTERNS} is not valid JSON ({e}); expected an object of name -> regex") from e
        if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
            raise ConfigError(
                f'{ENV_PATTERNS} must be a JSON object of name -> regex, e.g. {{"acme_key": "acme_[0-9a-f]{{32}}"}}'
            )
        try:
            return cls(extra_patterns=extra)
        except ConfigError as e:
            raise ConfigError(f"{ENV_PATTERNS}: {e}") from e

    @property
    def enabled(self) -> bool:
        """False when there is nothing to look for (``TOOLMETER_REDACT=off``)."""
        return bool(self._builtin or self._extra)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds this redactor finds, without repeats (built-ins first)."""
        return tuple(dict.fromkeys(r.kind for r in self._builtin + self._extra))

    def find(self, data: bytes, screened: bool = False) -> list[Secret]:
        """The secrets in ``data``: sorted, non-overlapping byte ranges of the original.

        ``screened``: the RE2 screen found nothing in ``data`` already, so no built-in can match."""
        if not data:
            return []
        rules = self._extra
        if self._builtin and not screened and (len(data) < PREFILTER_MIN_BYTES or _PREFILTER.could_match(data)):
            rules = self._builtin + rules
        lowered: bytes | None = None
        found: list[tuple[int, int, int, str]] = []
        for order, rule in enumerate(rules):
            if rule.lower:
                if lowered is None:
                    lowered = data.lower()
                buf = lowered
            else:
                buf = data
            if rule.keywords and not any(k in buf for k in rule.keywords):
                continue
            for m in rule.regex.finditer(buf):
                start, end = _secret_span(m, rule.groups)
                if end <= start:
                    continue
                if rule.boundary and m.start() > 0 and buf[m.start() - 1] in _ALNUM:
                    continue
                if rule.check is not None and not rule.check(m, data):
                    continue
                found.append((start, -end, order, rule.kind))
        found.sort()
        result: list[Secret] = []
        last_end = 0
        for start, neg_end, _, kind in found:
            if start >= last_end:
                result.append(Secret(start, -neg_end, kind))
                last_end = -neg_end
        return result

    def _replace(self, data: bytes, same_length: bool, screened: bool = False) -> tuple[bytes, int]:
        secrets = self.find(data, screened)
        if not secrets:
            return data, 0
        parts: list[bytes] = []
        pos = 0
        for s in secrets:
            parts.append(data[pos : s.start])
            parts.append(_mask(s.kind, s.end - s.start) if same_length else f"[REDACTED:{s.kind}]".encode())
            pos = s.end
        parts.append(data[pos:])
        return b"".join(parts), len(secrets)

    def redact_bytes(self, data: bytes) -> tuple[bytes, int]:
        """``data`` with each secret replaced by ``[REDACTED:<kind>]``, and how many were replaced.

        Byte offsets after the first secret change (retained ranges refer to the original);
        :meth:`redact_bytes_same_length` keeps them.
        """
        return self._replace(data, same_length=False)

    def redact_bytes_same_length(self, data: bytes) -> tuple[bytes, int]:
        """Like :meth:`redact_bytes`, but each secret becomes a mask of its exact byte length.

        The mask is ``[REDACTED:<kind>]`` padded with ``*``, or all ``*`` when the tag does
        not fit, so the result is as long as ``data`` and every byte outside the secrets
        keeps its offset: retained ranges of the original still apply.
        """
        return self._replace(data, same_length=True)

    def redact_many_same_length(self, datas: Sequence[bytes]) -> list[tuple[bytes, int]]:
        """:meth:`redact_bytes_same_length` of each of ``datas`` (a batch's small payloads): with
        :data:`SCREEN_MIN_PAYLOADS` or more, all are screened in one RE2 call first and only those
        it flags are scanned rule by rule."""
        flags = None
        if self._builtin and len(datas) >= SCREEN_MIN_PAYLOADS:
            flags = _PREFILTER.could_match_each(datas)
        if flags is None:
            return [self._replace(data, same_length=True) for data in datas]
        return [
            (data, 0) if not flag and not self._extra else self._replace(data, True, screened=not flag)
            for data, flag in zip(datas, flags, strict=True)
        ]

    def redact_text(self, text: str) -> tuple[str, int]:
        """:meth:`redact_bytes` for text (matched as UTF-8; lone surrogates pass through)."""
        out, n = self._replace(text.encode("utf-8", "surrogatepass"), same_length=False)
        return (out.decode("utf-8", "surrogatepass") if n else text), n


_PREFILTER: Final = _Prefilter(BUILTIN_RULES)


def _compile_extra(name: object, pattern: object) -> Rule:
    if not isinstance(name, str) or not _KIND_NAME.fullmatch(name):
        raise ConfigError(
            f"redaction pattern name {name!r} must be 1-64 letters, digits, '_', '.' or '-' (it names the kind)"
        )
    if not isinstance(pattern, str):
        raise ConfigError(f"redaction pattern {name!r} must be a regex string, not {type(pattern).__name__}")
    try:
        regex = re.compile(pattern.encode("utf-8"))
    except re.error as e:
        raise ConfigError(f"redaction pattern {name!r} is not a valid regex: {e} (pattern: {pattern!r})") from e
    return Rule(name, regex)

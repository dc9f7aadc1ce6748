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

Python's ``re`` costs about a millisecond per pattern per MB, so every payload is first read
once by RE2 (``google-re2``'s ``RE2::Set``, compiled once a process) with each rule's
*prefilter*: a looser RE2 pattern that matches wherever its rule can (``sk-[A-Za-z0-9_-]{20}``,
``(?i:password)…[:=]``…). The set says which prefilters match; only those rules run (none, for
most payloads). Extra patterns always run. On the real payloads the screen reads about 1 GB/s
and takes ~1.5 µs for a 1 KB result.
``python benchmarks/bench_redact.py [FILE]`` times the screen against the full scan.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

from collector.config import REDACT_ENV, REDACT_PATTERNS_ENV
from collector.errors import ConfigError
from collector.measure.secret_rules import BUILTIN_RULES, Rule

__all__ = ["ENV_PATTERNS", "ENV_SWITCH", "Redactor", "Secret"]

logger = logging.getLogger("toolmeter")

ENV_SWITCH: Final = REDACT_ENV
ENV_PATTERNS: Final = REDACT_PATTERNS_ENV

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


class _Screen:
    """One RE2 pass over a payload with every rule's prefilter (an ``RE2::Set``, compiled once):
    it says which rules can match, and only those are run. RE2 reads the bytes as Latin-1,
    a character a byte, as Python's bytes regexes do (read as UTF-8, ``[^@]`` would not match
    an invalid byte that the rule's own regex matches). It releases the GIL.

    Built on first use; without ``google-re2`` (a dependency) or if it refuses a prefilter,
    every rule runs on every payload (the same findings, at several times the cost), and the
    log says so once.
    """

    def __init__(self, rules: tuple[Rule, ...], use_re2: bool = True) -> None:
        self.rules = rules
        self._always = tuple(r for r in rules if r.prefilter is None)
        self._screened = tuple(r for r in rules if r.prefilter is not None)
        self._lock = threading.Lock()
        self._match: Callable[[bytes], list[int] | None] | None = None
        self._failed = not use_re2  # False: every rule runs (the baseline of bench_redact.py)

    def candidates(self, data: bytes) -> tuple[Rule, ...]:
        """The rules that can match ``data``, in their order (all of them when unscreened)."""
        match = self._match or self._build()
        if match is None:
            return self.rules
        hits = match(data)
        if not hits:
            return self._always
        if not self._always:
            return tuple(self._screened[i] for i in sorted(hits))
        chosen = {id(self._screened[i]) for i in hits}
        return tuple(r for r in self.rules if r.prefilter is None or id(r) in chosen)

    def _build(self) -> Callable[[bytes], list[int] | None] | None:
        with self._lock:
            if self._match is not None or self._failed:
                return self._match
            try:
                import re2

                options = re2.Options()
                options.encoding = options.Encoding.LATIN1
                screen = re2.Set.SearchSet(options)
                for rule in self._screened:
                    screen.Add(rule.prefilter.encode("latin-1"))  # type: ignore[union-attr]
                screen.Compile()
                self._match = screen.Match
            except Exception as e:  # not installed, another "re2", or a prefilter RE2 refuses
                self._failed = True
                logger.warning("toolmeter redaction: no RE2 screen (%s); every rule scans every payload", e)
            return self._match


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

    def find(self, data: bytes) -> list[Secret]:
        """The secrets in ``data``: sorted, non-overlapping byte ranges of the original."""
        if not data:
            return []
        rules = (_SCREEN.candidates(data) if self._builtin else ()) + self._extra
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

    def _replace(self, data: bytes, same_length: bool) -> tuple[bytes, int]:
        secrets = self.find(data)
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

    def redact_text(self, text: str) -> tuple[str, int]:
        """:meth:`redact_bytes` for text (matched as UTF-8; lone surrogates pass through)."""
        out, n = self._replace(text.encode("utf-8", "surrogatepass"), same_length=False)
        return (out.decode("utf-8", "surrogatepass") if n else text), n


_SCREEN = _Screen(BUILTIN_RULES)
"""The screen of the built-in rules, shared by every redactor of the process."""


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

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
no built-in can match, done. A match: the full scan. Extra patterns always scan.
``python benchmarks/bench_redact.py [FILE]`` times the screen against the full scan.
"""

from __future__ import annotations

import binascii
import json
import os
import re
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from collector.errors import ConfigError

__all__ = ["ENV_PATTERNS", "ENV_SWITCH", "Redactor", "Secret"]

ENV_SWITCH: Final = "TOOLMETER_REDACT"
ENV_PATTERNS: Final = "TOOLMETER_REDACT_PATTERNS"

PREFILTER_MIN_BYTES = 64 * 1024
"""Payloads this large are first screened in one RE2 pass (smaller ones: not worth a call)."""

_OFF: Final = frozenset({"off", "false", "0", "no"})
_ON: Final = frozenset({"on", "true", "1", "yes", ""})
_KIND_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_ALNUM: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_DIGITS: Final = frozenset(b"0123456789")
_LETTERS: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class Secret(NamedTuple):
    """One secret found: byte offsets ``[start, end)`` in the original payload, and its kind."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class _Rule:
    kind: str
    regex: re.Pattern[bytes]
    prefilter: str | None = None
    """RE2 pattern matching (at least) wherever ``regex`` can match; None: not screened."""
    keywords: tuple[bytes, ...] = ()
    """The rule runs only when one of these occurs in the payload (empty: always runs)."""
    lower: bool = False
    """Match the ASCII-lowercased copy (same offsets); keywords and regex are lowercase."""
    boundary: bool = False
    """The match must not follow a letter or digit (``task-…`` is not ``sk-…``)."""
    check: Callable[[re.Match[bytes], bytes], bool] | None = None
    """Last word on a match (of the searched buffer, lowercased when ``lower``) and the original bytes."""
    groups: tuple[str, ...] = ("secret",)
    """The first of these groups that took part is redacted; none: the whole match."""


# ---------------------------------------------------------------- assignments: key = value

# The word a key must end with (regex over the lowercased payload), per kind.
_ASSIGN_KEYS: Final = {
    "password": rb"pass(?:word|wd|phrase)",
    "secret": rb"secret(?:[_\-]?key)?",
    "api_key": rb"api[_\-]?key",
    "token": rb"token",
}
_MIN_QUOTED: Final = {"password": 3, "secret": 8, "api_key": 8, "token": 8}

# Keys ending in "token" that are not credentials: pagination cursors, tokenizer vocabulary.
_NOT_CREDENTIAL_KEY: Final = re.compile(
    rb"(?:page|next|continuation|cursor|sync|resume|delta|start|stop|end|bos|eos|pad|unk|cls|sep|mask"
    rb"|special|image|audio|video|vision|think|tool|fim|prefix|suffix|middle|sentinel|cancel(?:lation)?)"
    rb"[_.\-]?$"
)
_PLACEHOLDER: Final = re.compile(
    rb"\$\{?[a-z_]|\{\{|%\(|<[^>]*>$|\[redacted|(?:null|none|nil|true|false|undefined|redacted|hidden|masked)$"
)
_KEY_END: Final = rb"(?P<kq>\\{0,3}[\"'])?[ \t]{0,8}(?::=|=>|[:=])[ \t]{0,8}"
"""After the key: its closing quote (maybe escaped inside a JSON string), then ``:``, ``=``, ``:=`` or ``=>``."""


def _assignment_regex(kind: str) -> re.Pattern[bytes]:
    # Never inside a value: a line break, and a space unless a passphrase.
    stop = rb"\r\n" if kind == "password" else rb"\r\n\s"
    # "value" and 'value', with backslash escapes inside (an escaped quote or backslash)
    double = rb'"(?P<v>(?:[^"\\%s]|\\[^%s]){1,512})"' % (stop, stop)
    single = rb"'(?P<v2>(?:[^'\\%s]|\\[^%s]){1,512})'" % (stop, stop)
    # \"value\" inside a JSON string (escaped once or more): no quote inside
    escaped = rb"(?P<q>\\{1,3}[\"'])(?P<v3>[^\"'\\%s]{1,512})(?P=q)" % stop
    # a bare value ends at a space, a quote, a separator or a closing bracket
    bare = rb"(?P<u>[^\"'`\\\s,;&<>(){}\[\]]{4,512})(?=[\s\"'`\\,;&<>)\]}]|$)"
    return re.compile(_ASSIGN_KEYS[kind] + _KEY_END + b"(?:" + b"|".join((double, single, escaped, bare)) + b")")


_QUOTED_GROUPS: Final = ("v", "v2", "v3")


def _assignment_check(kind: str) -> Callable[[re.Match[bytes], bytes], bool]:
    min_quoted = _MIN_QUOTED[kind]

    def check(m: re.Match[bytes], data: bytes) -> bool:
        buf, start = m.string, m.start()
        if kind == "token" and _NOT_CREDENTIAL_KEY.search(buf, max(0, start - 16), start):
            return False
        group = next((g for g in _QUOTED_GROUPS if m.start(g) >= 0), None)
        if group is None:  # a bare value needs a letter and a digit
            value = m.group("u")
            ok = bool(_DIGITS.intersection(value) and _LETTERS.intersection(value))
        elif kind == "password":
            value = m.group(group)
            ok = len(value.strip()) >= min_quoted
        else:  # judged on the original case
            value = m.group(group)
            ok = len(value) >= min_quoted and _credential_like(data[m.start(group) : m.end(group)])
        return ok and not _is_placeholder(value)

    return check


def _credential_like(value: bytes) -> bool:
    """A quoted ``secret``/``api_key``/``token`` value: generated-looking, not a word or a name.

    Has a digit (or is 16+ characters of mixed case), and is not a lowercase dashed name
    like ``default-token-m7wjs`` (a Kubernetes Secret's name in a ``secret="…"`` label).
    """
    if not _DIGITS.intersection(value):
        return len(value) >= 16 and value.lower() != value and value.upper() != value
    if not _DASHED_NAME.fullmatch(value):
        return True
    # a name has a word in it ("default", "token"), not just hex groups ("4f9c6d1e-dead-…")
    return not any(len(part) >= 3 and part.isalpha() and part.strip(b"abcdef") for part in _NAME_SEP.split(value))


_DASHED_NAME: Final = re.compile(rb"[a-z0-9]+(?:[\-.][a-z0-9]+)+")
_NAME_SEP: Final = re.compile(rb"[\-.]")


def _is_placeholder(value: bytes) -> bool:
    """``${VAR}``, ``<token>``, ``****``, ``null``, already redacted… (``value`` is lowercase)."""
    return bool(_PLACEHOLDER.match(value)) or len(set(value)) == 1


def _group_not_placeholder(m: re.Match[bytes], data: bytes) -> bool:
    value = m.group("secret")
    return value is not None and not _is_placeholder(value.lower())


def _encodes_private_key(m: re.Match[bytes], data: bytes) -> bool:
    """Base64 of ``-----BEGIN … PRIVATE KEY-----`` (not of a certificate or a public key)."""
    try:
        return b"PRIVATE KEY-----" in binascii.a2b_base64(m.group(0)[:80])
    except binascii.Error:
        return False


def _has_digit(m: re.Match[bytes], data: bytes) -> bool:
    return bool(_DIGITS.intersection(m.group(0)))


# ---------------------------------------------------------------- the built-in rules

_WORD_END: Final = rb"(?![A-Za-z0-9_\-])"
_AUTH: Final = rb"authorization(?:\\{0,3}[\"'])?[ \t]{0,8}[:=][ \t]{0,8}(?:\\{0,3}[\"'])?[ \t]{0,8}"


def _builtin_rules() -> tuple[_Rule, ...]:
    c = re.compile
    # Order matters only for ties (same bytes found by two rules): the earlier rule names the kind.
    rules = [
        _Rule(
            "private_key",
            c(
                rb"-----BEGIN[A-Z0-9 ]{0,32} PRIVATE KEY(?: BLOCK)?-----"
                rb"(?:[\s\S]{0,65536}?-----END[A-Z0-9 ]{0,32} PRIVATE KEY(?: BLOCK)?-----"
                # cut off before its END line (a capped payload): the base64 lines that follow
                rb"|(?:(?:\r?\n|\\r\\n|\\n)[A-Za-z0-9+/=]{1,128}){0,2048})"
            ),
            prefilter=r"PRIVATE KEY",
            keywords=(b"PRIVATE KEY",),
        ),
        _Rule(
            "private_key",  # base64 of a PEM block: kubeconfig client-key-data, a TLS Secret's tls.key
            c(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{50,}={0,2}"),
            prefilter=r"LS0tLS1CRUdJTi",
            boundary=True,
            check=_encodes_private_key,
        ),
        _Rule(
            "bearer_token",
            c(_AUTH + rb"(?:bearer|token)[ \t]+(?P<secret>[a-z0-9\-._~+/]{8,}=*)"),
            prefilter=r"(?i:authorization)",
            keywords=(b"authorization",),
            lower=True,
            check=_group_not_placeholder,
        ),
        _Rule(
            "basic_auth",
            c(_AUTH + rb"basic[ \t]+(?P<secret>[a-z0-9+/]{8,}=*)"),
            prefilter=r"(?i:authorization)",
            keywords=(b"authorization",),
            lower=True,
        ),
        _Rule(
            "aws_secret_key",
            c(rb"secret_?access_?key" + _KEY_END + rb"(?:\\{0,3}[\"'])?(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+])"),
            prefilter=r"(?i:secret_?access_?key)",
            keywords=(b"access",),
            lower=True,
        ),
        _Rule(
            "aws_secret_key",
            c(rb"aws_?secret_?key" + _KEY_END + rb"(?:\\{0,3}[\"'])?(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+])"),
            prefilter=r"(?i:aws_?secret_?key)",
            keywords=(b"secret",),
            lower=True,
        ),
        _Rule(
            "anthropic_key",
            c(rb"sk-ant-[a-z]{2,8}[0-9]{0,3}-[A-Za-z0-9_\-]{32,}" + _WORD_END),
            prefilter=r"sk-[A-Za-z0-9_\-]{20}",
            boundary=True,
        ),
        _Rule(
            "openai_key",
            c(
                rb"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|or-v1-[0-9a-f]{32,}|[A-Za-z0-9]{32,})"
                + _WORD_END
            ),
            prefilter=r"sk-[A-Za-z0-9_\-]{20}",
            boundary=True,
            check=_has_digit,
        ),
        _Rule(
            "aws_access_key_id",
            c(rb"A[KS]IA[A-Z2-7]{16}(?![A-Za-z0-9])"),
            prefilter=r"A[KS]IA[A-Z2-7]{16}",
            boundary=True,
        ),
        _Rule(
            "github_token",
            c(rb"gh[pousr]_[A-Za-z0-9]{36,251}" + _WORD_END),
            prefilter=r"gh[pousr]_[A-Za-z0-9]{36}",
            boundary=True,
        ),
        _Rule(
            "github_token",
            c(rb"github_pat_[A-Za-z0-9_]{40,244}" + _WORD_END),
            prefilter=r"github_pat_",
            keywords=(b"github_pat_",),
            boundary=True,
        ),
        _Rule(
            "gitlab_token",
            c(rb"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+){0,3}" + _WORD_END),
            prefilter=r"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20}",
            boundary=True,
        ),
        _Rule(
            "slack_webhook",
            c(rb"hooks\.slack\.com/services/(?P<secret>T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,})"),
            prefilter=r"hooks\.slack\.com/services/",
            keywords=(b"hooks.slack.com",),
        ),
        _Rule(
            "slack_token",
            c(rb"xox(?:[abprse]|e\.xox[bp])-[A-Za-z0-9\-]{10,250}" + _WORD_END),
            prefilter=r"xox(?:[abprse]|e\.xox[bp])-[A-Za-z0-9\-]{10}",
            boundary=True,
            check=_has_digit,
        ),
        _Rule(
            "stripe_key",
            c(rb"[rs]k_(?:live|test)_[A-Za-z0-9]{20,247}" + _WORD_END),
            prefilter=r"[rs]k_(?:live|test)_",
            keywords=(b"k_live_", b"k_test_"),
            boundary=True,
        ),
        _Rule(
            "google_api_key",
            c(rb"AIza[A-Za-z0-9_\-]{35}" + _WORD_END),
            prefilter=r"AIza[A-Za-z0-9_\-]{35}",
            boundary=True,
        ),
        _Rule(
            "jwt",
            c(rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*" + _WORD_END),
            prefilter=r"eyJ[A-Za-z0-9_\-]{8}",
            boundary=True,
        ),
        _Rule(
            "url_password",
            c(rb"://[^\s:/?#@\"'<>\\\[\]]{0,128}:(?P<secret>[^\s/?#@\"'<>\\]{1,256})@(?=[A-Za-z0-9\[])"),
            prefilter=r"://[^\s/@]*:[^\s/@]*@",
            check=_group_not_placeholder,
        ),
    ]
    for kind in _ASSIGN_KEYS:
        rules.append(
            _Rule(
                kind,
                _assignment_regex(kind),
                prefilter=r"(?i:" + _ASSIGN_KEYS[kind].decode() + r")(?:\\{0,3}[\"'])?[ \t]{0,8}[:=]",
                lower=True,
                check=_assignment_check(kind),
                groups=(*_QUOTED_GROUPS, "u"),
            )
        )
    return tuple(rules)


_BUILTIN_RULES: Final = _builtin_rules()


# ---------------------------------------------------------------- the one-pass screen


class _Prefilter:
    """One RE2 pass (``pyarrow.compute``, which releases the GIL) over the union of the rules'
    prefilters: when nothing matches, no built-in rule can match and the payload is clean.

    Built on first use (pyarrow.compute takes ~50 ms to import); if pyarrow or its RE2 is
    missing, every payload takes the full scan instead.
    """

    def __init__(self, rules: tuple[_Rule, ...]) -> None:
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
        self._builtin: tuple[_Rule, ...] = _BUILTIN_RULES if builtins else ()
        self._extra: tuple[_Rule, ...] = tuple(_compile_extra(k, v) for k, v in (extra_patterns or {}).items())

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
        rules = self._extra
        if self._builtin and (len(data) < PREFILTER_MIN_BYTES or _PREFILTER.could_match(data)):
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


_PREFILTER: Final = _Prefilter(_BUILTIN_RULES)


def _compile_extra(name: object, pattern: object) -> _Rule:
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
    return _Rule(name, regex)

"""Secret rules: the built-in patterns that find credentials in tool payloads, as a table of data.

Each :class:`Rule` names a kind, its regex over the payload bytes, and what makes it cheap
(a looser RE2 *prefilter* for the one-pass screen, *keywords* that must occur) or precise
(a *boundary*, a *check* on the match). The kinds and what each matches are listed in
:mod:`collector.measure.redaction`, which runs the rules.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

_DIGITS: Final = frozenset(b"0123456789")
_LETTERS: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True)
class Rule:
    """One way of finding a kind of secret."""

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


def _assignment_rule(kind: str) -> Rule:
    """The rule for ``key = value`` assignments whose key ends with the word of ``kind``."""
    return Rule(
        kind,
        _assignment_regex(kind),
        prefilter=r"(?i:" + _ASSIGN_KEYS[kind].decode() + r")(?:\\{0,3}[\"'])?[ \t]{0,8}[:=]",
        lower=True,
        check=_assignment_check(kind),
        groups=(*_QUOTED_GROUPS, "u"),
    )


BUILTIN_RULES: Final[tuple[Rule, ...]] = (
    # Order matters only for ties (same bytes found by two rules): the earlier rule names the kind.
    Rule(
        "private_key",
        re.compile(
            rb"-----BEGIN[A-Z0-9 ]{0,32} PRIVATE KEY(?: BLOCK)?-----"
            rb"(?:[\s\S]{0,65536}?-----END[A-Z0-9 ]{0,32} PRIVATE KEY(?: BLOCK)?-----"
            # cut off before its END line (a capped payload): the base64 lines that follow
            rb"|(?:(?:\r?\n|\\r\\n|\\n)[A-Za-z0-9+/=]{1,128}){0,2048})"
        ),
        prefilter=r"PRIVATE KEY",
        keywords=(b"PRIVATE KEY",),
    ),
    Rule(
        "private_key",  # base64 of a PEM block: kubeconfig client-key-data, a TLS Secret's tls.key
        re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{50,}={0,2}"),
        prefilter=r"LS0tLS1CRUdJTi",
        boundary=True,
        check=_encodes_private_key,
    ),
    Rule(
        "bearer_token",
        re.compile(_AUTH + rb"(?:bearer|token)[ \t]+(?P<secret>[a-z0-9\-._~+/]{8,}=*)"),
        prefilter=r"(?i:authorization)",
        keywords=(b"authorization",),
        lower=True,
        check=_group_not_placeholder,
    ),
    Rule(
        "basic_auth",
        re.compile(_AUTH + rb"basic[ \t]+(?P<secret>[a-z0-9+/]{8,}=*)"),
        prefilter=r"(?i:authorization)",
        keywords=(b"authorization",),
        lower=True,
    ),
    Rule(
        "aws_secret_key",
        re.compile(rb"secret_?access_?key" + _KEY_END + rb"(?:\\{0,3}[\"'])?(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+])"),
        prefilter=r"(?i:secret_?access_?key)",
        keywords=(b"access",),
        lower=True,
    ),
    Rule(
        "aws_secret_key",
        re.compile(rb"aws_?secret_?key" + _KEY_END + rb"(?:\\{0,3}[\"'])?(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+])"),
        prefilter=r"(?i:aws_?secret_?key)",
        keywords=(b"secret",),
        lower=True,
    ),
    Rule(
        "anthropic_key",
        re.compile(rb"sk-ant-[a-z]{2,8}[0-9]{0,3}-[A-Za-z0-9_\-]{32,}" + _WORD_END),
        prefilter=r"sk-[A-Za-z0-9_\-]{20}",
        boundary=True,
    ),
    Rule(
        "openai_key",
        re.compile(
            rb"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|or-v1-[0-9a-f]{32,}|[A-Za-z0-9]{32,})" + _WORD_END
        ),
        prefilter=r"sk-[A-Za-z0-9_\-]{20}",
        boundary=True,
        check=_has_digit,
    ),
    Rule(
        "aws_access_key_id",
        re.compile(rb"A[KS]IA[A-Z2-7]{16}(?![A-Za-z0-9])"),
        prefilter=r"A[KS]IA[A-Z2-7]{16}",
        boundary=True,
    ),
    Rule(
        "github_token",
        re.compile(rb"gh[pousr]_[A-Za-z0-9]{36,251}" + _WORD_END),
        prefilter=r"gh[pousr]_[A-Za-z0-9]{36}",
        boundary=True,
    ),
    Rule(
        "github_token",
        re.compile(rb"github_pat_[A-Za-z0-9_]{40,244}" + _WORD_END),
        prefilter=r"github_pat_",
        keywords=(b"github_pat_",),
        boundary=True,
    ),
    Rule(
        "gitlab_token",
        re.compile(rb"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+){0,3}" + _WORD_END),
        prefilter=r"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20}",
        boundary=True,
    ),
    Rule(
        "slack_webhook",
        re.compile(rb"hooks\.slack\.com/services/(?P<secret>T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,})"),
        prefilter=r"hooks\.slack\.com/services/",
        keywords=(b"hooks.slack.com",),
    ),
    Rule(
        "slack_token",
        re.compile(rb"xox(?:[abprse]|e\.xox[bp])-[A-Za-z0-9\-]{10,250}" + _WORD_END),
        prefilter=r"xox(?:[abprse]|e\.xox[bp])-[A-Za-z0-9\-]{10}",
        boundary=True,
        check=_has_digit,
    ),
    Rule(
        "stripe_key",
        re.compile(rb"[rs]k_(?:live|test)_[A-Za-z0-9]{20,247}" + _WORD_END),
        prefilter=r"[rs]k_(?:live|test)_",
        keywords=(b"k_live_", b"k_test_"),
        boundary=True,
    ),
    Rule(
        "google_api_key",
        re.compile(rb"AIza[A-Za-z0-9_\-]{35}" + _WORD_END),
        prefilter=r"AIza[A-Za-z0-9_\-]{35}",
        boundary=True,
    ),
    Rule(
        "jwt",
        re.compile(rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*" + _WORD_END),
        prefilter=r"eyJ[A-Za-z0-9_\-]{8}",
        boundary=True,
    ),
    Rule(
        "url_password",
        re.compile(rb"://[^\s:/?#@\"'<>\\\[\]]{0,128}:(?P<secret>[^\s/?#@\"'<>\\]{1,256})@(?=[A-Za-z0-9\[])"),
        prefilter=r"://[^\s/@]*:[^\s/@]*@",
        check=_group_not_placeholder,
    ),
    *(_assignment_rule(kind) for kind in _ASSIGN_KEYS),
)
"""The built-in rules, in the order that names the kind of a tie (see :mod:`collector.measure.redaction`)."""

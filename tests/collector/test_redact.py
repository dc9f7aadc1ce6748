"""Secret redaction (collector/measure/redaction.py).

Every secret here is generated at run time from a seeded RNG in the provider's format:
fake, never a real credential, and never a literal in this file (so no scanner flags it).
"""

from __future__ import annotations

import base64
import json
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.errors import ConfigError
from collector.measure import redaction as redact
from collector.measure import secret_rules
from collector.measure.redaction import Redactor, Secret
from tests.conftest import realworld, realworld_names

RNG = random.Random(20240601)
B62 = string.ascii_letters + string.digits
URLSAFE = B62 + "-_"
B64 = B62 + "+/"
B32 = string.ascii_uppercase + "234567"
HEX = "0123456789abcdef"


def rand(alphabet: str, n: int) -> str:
    """``n`` random characters, with at least one digit when the alphabet has digits."""
    while True:
        s = "".join(RNG.choice(alphabet) for _ in range(n))
        if not any(ch.isdigit() for ch in alphabet) or any(ch.isdigit() for ch in s):
            return s


def b64url(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def fake_jwt() -> str:
    header = b64url({"alg": "RS256", "typ": "JWT", "kid": rand(HEX, 16)})
    payload = b64url({"sub": "system:serviceaccount:default:app", "exp": 1767225600, "iat": 1735689600})
    return f"{header}.{payload}.{rand(URLSAFE, 86)}"


def fake_pem(label: str = "RSA ", lines: int = 12, newline: str = "\n") -> str:
    body = newline.join(rand(B64, 64) for _ in range(lines))
    return f"-----BEGIN {label}PRIVATE KEY-----{newline}{body}{newline}{rand(B64, 20)}==" + (
        f"{newline}-----END {label}PRIVATE KEY-----"
    )


OPENAI_LEGACY = "sk-" + rand(B62, 20) + "T3BlbkFJ" + rand(B62, 20)
OPENAI_PROJECT = "sk-proj-" + rand(URLSAFE, 74) + "T3BlbkFJ" + rand(URLSAFE, 74)
OPENAI_SVCACCT = "sk-svcacct-" + rand(URLSAFE, 60) + "T3BlbkFJ" + rand(URLSAFE, 60)
ANTHROPIC = "sk-ant-api03-" + rand(URLSAFE, 93) + "AA"
ANTHROPIC_ADMIN = "sk-ant-admin01-" + rand(URLSAFE, 93) + "AA"
AWS_ID = "AKIA" + rand(B32, 16)
AWS_SESSION_ID = "ASIA" + rand(B32, 16)
AWS_SECRET = rand(B64, 40)
GITHUB = {prefix: prefix + rand(B62, 36) for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")}
GITHUB_PAT = "github_pat_" + rand(B62, 22) + "_" + rand(B62, 59)
GITLAB = "glpat-" + rand(URLSAFE, 20)
SLACK_BOT = f"xoxb-{rand(string.digits, 12)}-{rand(string.digits, 13)}-{rand(B62, 24)}"
SLACK_USER = f"xoxp-{rand(string.digits, 12)}-{rand(string.digits, 12)}-{rand(string.digits, 13)}-{rand(HEX, 32)}"
SLACK_HOOK_PATH = f"T{rand(B32, 8)}/B{rand(B32, 10)}/{rand(B62, 24)}"
STRIPE = "sk_" + "live_" + rand(B62, 99)
STRIPE_RESTRICTED = "rk_" + "live_" + rand(B62, 24)
GOOGLE = "AIza" + rand(URLSAFE, 35)
OPAQUE = rand(URLSAFE, 43)
JWT = fake_jwt()
PEM = fake_pem()
OPENSSH_PEM = fake_pem("OPENSSH ", 5)
PEM_B64 = base64.b64encode(fake_pem("EC ", 3).encode()).decode()
CERT_B64 = base64.b64encode(fake_pem("", 3).replace("PRIVATE KEY", "CERTIFICATE").encode()).decode()
BASIC = base64.b64encode(b"deploy:" + OPAQUE.encode()).decode()
CLIENT_SECRET = rand(URLSAFE, 32)
HEX_SECRET = rand(HEX, 64)
HEX_KEY = rand(HEX, 32)
B62_KEY = rand(B62, 40)
ACCESS_TOKEN = rand(URLSAFE, 40)
HEX_TOKEN = rand(HEX, 24)

# (kind, the text holding the secret, the secret itself): one per built-in kind and form.
CASES: list[tuple[str, str, str]] = [
    ("openai_key", f"OPENAI_API_KEY={OPENAI_LEGACY}\n", OPENAI_LEGACY),
    ("openai_key", f'client = OpenAI(api_key="{OPENAI_PROJECT}")', OPENAI_PROJECT),
    ("openai_key", f"using key {OPENAI_SVCACCT} for the batch", OPENAI_SVCACCT),
    ("anthropic_key", f"export ANTHROPIC_API_KEY='{ANTHROPIC}'", ANTHROPIC),
    ("anthropic_key", f'{{"admin_key": "{ANTHROPIC_ADMIN}"}}', ANTHROPIC_ADMIN),
    ("aws_access_key_id", f"aws_access_key_id = {AWS_ID}\n", AWS_ID),
    ("aws_access_key_id", f'"AccessKeyId": "{AWS_SESSION_ID}",', AWS_SESSION_ID),
    ("aws_secret_key", f"[default]\naws_secret_access_key = {AWS_SECRET}\n", AWS_SECRET),
    ("aws_secret_key", f'{{"Credentials": {{"SecretAccessKey": "{AWS_SECRET}"}}}}', AWS_SECRET),
    ("aws_secret_key", f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
    *[("github_token", f"remote: https://x-access-token@github.com used {tok}\n", tok) for tok in GITHUB.values()],
    ("github_token", f"GH_TOKEN={GITHUB_PAT}", GITHUB_PAT),
    ("gitlab_token", f"curl --header 'PRIVATE-TOKEN: {GITLAB}' https://gitlab.example.com/api/v4/projects", GITLAB),
    ("slack_token", f"SLACK_BOT_TOKEN={SLACK_BOT}", SLACK_BOT),
    ("slack_token", f"token {SLACK_USER} expired", SLACK_USER),
    ("slack_webhook", f"POST https://hooks.slack.com/services/{SLACK_HOOK_PATH} 200", SLACK_HOOK_PATH),
    ("stripe_key", f"stripe.api_key = '{STRIPE}'", STRIPE),
    ("stripe_key", f"restricted: {STRIPE_RESTRICTED}.", STRIPE_RESTRICTED),
    ("google_api_key", f"https://maps.googleapis.com/maps/api/geocode/json?key={GOOGLE}&address=x", GOOGLE),
    ("bearer_token", f"> GET /v1/models HTTP/1.1\r\n> Authorization: Bearer {OPAQUE}\r\n", OPAQUE),
    ("bearer_token", f'{{"headers": {{"authorization": "Bearer {OPAQUE}"}}}}', OPAQUE),
    ("bearer_token", f'"{{\\"Authorization\\": \\"Bearer {OPAQUE}\\"}}"', OPAQUE),
    ("bearer_token", f"curl -H 'Authorization: token {GITHUB['ghp_'][4:]}' api.github.com", GITHUB["ghp_"][4:]),
    ("basic_auth", f"Authorization: Basic {BASIC}", BASIC),
    ("jwt", f"id_token_hint={JWT}&state=1", JWT),
    ("jwt", f"kubectl logs: token is {JWT}\n", JWT),
    ("private_key", f"$ cat ~/.ssh/id_rsa\n{PEM}\n$ ", PEM),
    ("private_key", OPENSSH_PEM, OPENSSH_PEM),
    ("private_key", f"users:\n- name: admin\n  user:\n    client-key-data: {PEM_B64}\n", PEM_B64),
    ("private_key", f'{{"kind": "Secret", "data": {{"tls.key": "{PEM_B64}"}}}}', PEM_B64),
    ("url_password", "DATABASE_URL=postgres://app:S3cr3t-pw_2024@db.internal:5432/app", "S3cr3t-pw_2024"),
    ("url_password", "redis://:hunter2hunter2@cache:6379/0", "hunter2hunter2"),
    ("password", '{"username": "admin", "password": "hunter2!"}', "hunter2!"),
    ("password", "mysql --user=root --password=Tr0ub4dor3 -h db", "Tr0ub4dor3"),
    ("password", "DB_PASSWORD: pa55w0rd-x\n", "pa55w0rd-x"),
    ("password", '"{\\"password\\": \\"correct horse battery\\"}"', "correct horse battery"),
    ("password", "Server=db;User Id=sa;Password=Passw0rd123;", "Passw0rd123"),
    ("password", json.dumps({"password": "p4ss\"w'rd\\!"}), "p4ss\\\"w'rd\\\\!"),
    ("password", "{'db_password': 'it\\'s-a-s3cret'}", "it\\'s-a-s3cret"),
    ("secret", f'{{"client_id": "web", "client_secret": "{CLIENT_SECRET}"}}', CLIENT_SECRET),
    ("secret", f"JWT_SECRET={HEX_SECRET}\n", HEX_SECRET),
    ("api_key", f"X-Api-Key: {HEX_KEY}\r\n", HEX_KEY),
    ("api_key", f'{{"apiKey": "{B62_KEY}"}}', B62_KEY),
    ("token", f'{{"access_token": "{ACCESS_TOKEN}", "token_type": "bearer", "expires_in": 3600}}', ACCESS_TOKEN),
    ("token", f"https://example.com/download?file=a.zip&token={HEX_TOKEN}&x=1", HEX_TOKEN),
]


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.fixture(params=[False, True], ids=["unscreened", "screened"])
def screened(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a test with the one-pass RE2 screen and without it (every rule on every payload)."""
    if not request.param:
        monkeypatch.setattr(redact, "_SCREEN", redact._Screen(secret_rules.BUILTIN_RULES, use_re2=False))
    return bool(request.param)


# ---------------------------------------------------------------- each kind is caught


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_builtin_kind_is_caught_by_both_variants(
    case: tuple[str, str, str], redactor: Redactor, screened: bool
) -> None:
    kind, text, secret = case
    data = text.encode()
    found = redactor.find(data)
    assert [s.kind for s in found] == [kind], found
    if secret:
        assert data[found[0].start : found[0].end] == secret.encode()

    out, n = redactor.redact_bytes(data)
    assert n == 1
    assert f"[REDACTED:{kind}]".encode() in out
    assert (secret or "\x00").encode() not in out

    same, n = redactor.redact_bytes_same_length(data)
    assert n == 1
    assert len(same) == len(data)
    assert (secret or "\x00").encode() not in same


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_text_variant(case: tuple[str, str, str], redactor: Redactor) -> None:
    kind, text, _ = case
    out, n = redactor.redact_text("résumé ✓ " + text)
    assert n == 1
    assert out.startswith("résumé ✓ ")
    assert f"[REDACTED:{kind}]" in out


def test_every_builtin_kind_has_a_case(redactor: Redactor) -> None:
    assert set(redactor.kinds) == {kind for kind, _, _ in CASES}


def test_only_the_value_is_redacted(redactor: Redactor) -> None:
    out, n = redactor.redact_text("postgres://app:S3cr3t-pw_2024@db.internal:5432/app")
    assert (out, n) == ("postgres://app:[REDACTED:url_password]@db.internal:5432/app", 1)
    out, _ = redactor.redact_text('{"password": "hunter2!", "user": "admin"}')
    assert out == '{"password": "[REDACTED:password]", "user": "admin"}'
    out, _ = redactor.redact_text(f"Authorization: Bearer {OPAQUE}\nHost: api")
    assert out == "Authorization: Bearer [REDACTED:bearer_token]\nHost: api"
    out, _ = redactor.redact_text(f"aws_secret_access_key = {AWS_SECRET}\nregion = us-east-1")
    assert out == "aws_secret_access_key = [REDACTED:aws_secret_key]\nregion = us-east-1"


def test_anthropic_keys_are_not_called_openai(redactor: Redactor) -> None:
    assert [s.kind for s in redactor.find(f"{ANTHROPIC} {OPENAI_PROJECT}".encode())] == ["anthropic_key", "openai_key"]


def test_private_key_block_spans_lines_and_json_escapes(redactor: Redactor) -> None:
    escaped = fake_pem("", 8, newline="\\n")
    doc = json.dumps({"type": "service_account", "private_key": escaped.replace("\\n", "\n"), "client_email": "x"})
    out, n = redactor.redact_text(doc)
    assert n == 1
    assert json.loads(out)["private_key"] == "[REDACTED:private_key]"
    assert json.loads(out)["client_email"] == "x"

    cut = PEM[: len(PEM) // 2]  # a capped payload that ends inside the key
    out, n = redactor.redact_text(f"key:\n{cut}")
    assert (out, n) == ("key:\n[REDACTED:private_key]", 1)


def test_several_secrets_in_one_payload(redactor: Redactor) -> None:
    env = "\n".join(
        [
            "HOME=/home/app",
            f"OPENAI_API_KEY={OPENAI_PROJECT}",
            f"AWS_ACCESS_KEY_ID={AWS_ID}",
            f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
            f"GITHUB_TOKEN={GITHUB['ghs_']}",
            "DATABASE_URL=postgres://app:S3cr3t-pw_2024@db:5432/app",
            "PATH=/usr/local/bin:/usr/bin",
            "",
        ]
    )
    found = redactor.find(env.encode())
    assert [s.kind for s in found] == [
        "openai_key",
        "aws_access_key_id",
        "aws_secret_key",
        "github_token",
        "url_password",
    ]
    out, n = redactor.redact_text(env)
    assert n == 5
    assert "HOME=/home/app\n" in out and "PATH=/usr/local/bin:/usr/bin\n" in out


# ---------------------------------------------------------------- offsets


def test_same_length_keeps_every_byte_outside_the_secrets(redactor: Redactor) -> None:
    data = "\n".join(text for _, text, _ in CASES).encode()
    found = redactor.find(data)
    assert len(found) == len(CASES)
    masked, n = redactor.redact_bytes_same_length(data)
    assert n == len(CASES)
    assert len(masked) == len(data)
    pos = 0
    for s in found:
        assert masked[pos : s.start] == data[pos : s.start]  # the text around is where it was
        mask = masked[s.start : s.end]
        tag = f"[REDACTED:{s.kind}]".encode()
        assert mask == (tag + b"*" * (len(mask) - len(tag)) if len(tag) <= len(mask) else b"*" * len(mask))
        pos = s.end
    assert masked[pos:] == data[pos:]


def test_same_length_mask_shapes(redactor: Redactor) -> None:
    out, _ = redactor.redact_bytes_same_length(b'"password": "hunter2"')
    assert out == b'"password": "*******"'  # "[REDACTED:password]" does not fit in 7 bytes
    out, _ = redactor.redact_bytes_same_length(OPENAI_LEGACY.encode())
    assert out == b"[REDACTED:openai_key]" + b"*" * (len(OPENAI_LEGACY) - 21)


def test_same_length_counts_bytes_not_characters(redactor: Redactor) -> None:
    password = "pässwörd-très-sûr☕"
    assert (len(password), len(password.encode())) == (18, 24)
    data = f'{{"note": "café ☕", "password": "{password}"}}'.encode()
    out, n = redactor.redact_bytes_same_length(data)
    assert n == 1
    assert len(out) == len(data)
    assert out.decode() == '{"note": "café ☕", "password": "[REDACTED:password]*****"}'


def test_redacting_twice_changes_nothing(redactor: Redactor) -> None:
    data = "\n".join(text for _, text, _ in CASES).encode()
    for variant in (redactor.redact_bytes, redactor.redact_bytes_same_length):
        once, n = variant(data)
        assert n == len(CASES)
        assert variant(once) == (once, 0)


# ---------------------------------------------------------------- no false positives

# Ordinary tool output that has the words, the shapes or the prefixes, and no secret.
NOT_SECRETS = [
    '{"usage": {"input_tokens": 1234, "output_tokens": 56, "cache_read_input_tokens": 0}}',
    '{"model": "claude", "max_tokens": 4096, "total_tokens": "1290", "token_count": 12}',
    '{"access_token": null, "token_type": "bearer", "expires_in": 3600, "id_token": ""}',
    '{"next_page_token": "CiAKGjBpNDd2Nmp2Zml2cXRkMjIwdzB1NHNzbzE", "pageToken": "Q2lBS0dqQnBORGQy"}',
    '{"bos_token": "<s>", "eos_token": "</s>", "pad_token": "[PAD]", "mask_token": "[MASK]"}',
    '{"logprobs": {"content": [{"token": " the", "logprob": -0.01}, {"token": "Hello", "logprob": -1.2}]}}',
    '{"password": "", "secret": true, "api_key": null, "token": 42}',
    '{"password": "${DB_PASSWORD}", "api_key": "<your-api-key>", "token": "********", "secret": "{{ secret }}"}',
    "    token = token\n    password = get_password(user)\n    secret = os.environ['SECRET']\n",
    "def login(username, password):\n    self.api_key = api_key\n",
    "Volumes:\n  kube-api-access-x7k2p:\n    Type: Projected\n    secret: kube-system\n    SecretName: default-token-m7wjs\n",
    '"uid": "4f9c6d1e-2b7a-4c1d-9e8f-0a1b2c3d4e5f", "resourceVersion": "123456"',
    '"imageID": "docker-pullable://nginx@sha256:0d17b565c37bcbd895e9d92315a05c1c3c9a29f762b011a10c54a66cd53c9b31"',
    "containerd://8b3c9a1f0e2d4c6b8a0f1e3d5c7b9a2f4e6d8c0b1a3f5e7d9c2b4a6f8e0d1c3b",
    "digest: sha256:" + "a" * 8 + HEX * 3 + "  size: 1570",
    '"config.json": "eyJhdXRocyI6eyJodHRwczovL2luZGV4LmRvY2tlci5pby92MS8iOnsiYXV0aCI6IiJ9fX0="',
    '<meta name="visitor-payload" content="eyJyZWZlcnJlciI6IiIsInJlcXVlc3RfaWQiOiIxRUJFOjIxQTlDR"',
    "task-7f9c2d1e8b3a4c5d6e7f8a9b0c1d2e3f4a5b6c7d running; disk-0123456789abcdefghijklmnopqrstuv",
    "GET https://api.example.com:8443/v1/items?page=2 200 (user agent: curl/8.4)",
    "ssh://git@github.com:22/org/repo.git and git@github.com:org/repo.git",
    "Authorization: Bearer $TOKEN  # from the environment\nAuthorization: Bearer <token>\n",
    "The password: is required. Your token: expired.",
    "sk-learn, risk-free, ghp_ (prefix only), AKIA (prefix), xoxb- (prefix), AIza (prefix)",
    f"clusters:\n- cluster:\n    certificate-authority-data: {CERT_B64}\n",
    'kube_secret_info{namespace="default", secret="default-token-m7wjs"} 1',
    '{"metric": {"secret": "grafana-admin-credentials", "token": "sa-token-7x2kq"}, "value": [1, "1"]}',
    '{"token": "Programming", "logprob": -3.2}, {"token": "Ġunderstanding", "logprob": -0.4}',
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_output_is_left_alone(text: str, redactor: Redactor, screened: bool) -> None:
    assert redactor.find(text.encode()) == []
    assert redactor.redact_text(text) == (text, 0)


def test_token_counts_in_json_are_untouched(redactor: Redactor) -> None:
    usage = {
        "id": "msg_01",
        "usage": {"input_tokens": 1234, "output_tokens": 56, "cache_creation_input_tokens": 7},
        "max_tokens": 8192,
        "tokens": {"prompt": 10, "completion": "20"},
    }
    text = json.dumps(usage, indent=2)
    assert redactor.redact_text(text) == (text, 0)
    assert redactor.redact_bytes_same_length(text.encode()) == (text.encode(), 0)


# What the real tool outputs in ../shared/realworld/payloads trigger, and why each is a secret:
# octokit's recorded GitHub requests carry "authorization": "token 0000…0001" five times
# (GitHub's `Authorization: token <PAT>` scheme; the fixture's value is a stand-in, but a
# recorded real request has a live token there). Nothing else: not the Kubernetes uids,
# image sha256 digests and service-account volume names, not the Prometheus rules, the
# 8,016-line pod log, the base64 JSON blob in the GitHub page's <meta>, nor the AWS pages.
REALWORLD_HITS = {
    "octokit-fixtures__api.github.com__paginate-issues__normalized-fixture.json": ["bearer_token"] * 5,
}


@pytest.mark.parametrize("name", realworld_names())
def test_real_payloads_trigger_only_the_explained_redactions(name: str, redactor: Redactor, screened: bool) -> None:
    data = realworld(name)
    found = redactor.find(data)
    assert [s.kind for s in found] == REALWORLD_HITS.get(name, [])
    for s in found:
        assert data[s.start - len(b'"authorization": "token ') : s.start] == b'"authorization": "token '
    masked, n = redactor.redact_bytes_same_length(data)
    assert n == len(found)
    assert len(masked) == len(data)


def test_the_screen_is_valid_re2() -> None:
    # google-re2 is a dependency: a screen that fails to build would silently cost 5x the time
    assert redact._SCREEN._build() is not None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_case_passes_the_screen_of_its_own_rule(case: tuple[str, str, str]) -> None:
    # The screen must let a rule run wherever it can match
    kind, text, _ = case
    assert kind in {rule.kind for rule in redact._SCREEN.candidates(text.encode())}


def test_the_screen_reads_bytes_as_the_rules_do() -> None:
    # RE2 reading UTF-8 would not match [^@] on an invalid byte, which the rule's bytes regex does
    data = b"dsn: postgres://app\xff:s3cr\xe9t-pw@db.internal:5432/orders"
    assert "url_password" in {rule.kind for rule in redact._SCREEN.candidates(data)}
    found = Redactor().find(data)
    assert [(data[s.start : s.end], s.kind) for s in found] == [(b"s3cr\xe9t-pw", "url_password")]


def test_a_large_clean_payload_runs_no_rule(redactor: Redactor) -> None:
    log = "".join(
        f"2025-06-20T10:38:{i % 60:02d}.{i % 1000:03d}Z [INFO] auth-service - login ok - user_{i} - "
        f"GET https://api.internal/v1/users/{i}?page=2 200 - trace {i * 7919:x}\n"
        for i in range(12000)
    ).encode()
    assert redact._SCREEN.candidates(log) == ()
    assert redactor.redact_bytes_same_length(log) == (log, 0)
    # ... and a secret anywhere in it is still found, by the rules that run
    for at in (0, len(log) // 2, len(log)):
        dirty = log[:at] + f" GITHUB_TOKEN={GITHUB['ghp_']} ".encode() + log[at:]
        assert {rule.kind for rule in redact._SCREEN.candidates(dirty)} == {"github_token", "token"}
        assert [s.kind for s in redactor.find(dirty)] == ["github_token"]


# ---------------------------------------------------------------- configuration


def test_extra_patterns_name_the_kind() -> None:
    r = Redactor(extra_patterns={"acme_key": r"acme_[0-9a-f]{32}", "ticket": r"ticket=(?P<secret>\w+)"})
    key = "acme_" + rand(HEX, 32)
    out, n = r.redact_text(f"using {key}; ticket=abc123 done; {GITHUB['gho_']}")
    assert n == 3
    assert out == "using [REDACTED:acme_key]; ticket=[REDACTED:ticket] done; [REDACTED:github_token]"
    assert r.kinds[-2:] == ("acme_key", "ticket")


def test_extra_patterns_without_builtins() -> None:
    r = Redactor(extra_patterns={"internal_host": r"[a-z0-9-]+\.corp\.example\.com"}, builtins=False)
    out, n = r.redact_text(f"db01.corp.example.com {GITHUB['ghp_']}")
    assert (out, n) == (f"[REDACTED:internal_host] {GITHUB['ghp_']}", 1)


def test_an_empty_match_redacts_nothing() -> None:
    assert Redactor(extra_patterns={"maybe": r"x*"}, builtins=False).redact_text("abc") == ("abc", 0)


def test_bad_regex_is_a_named_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"redaction pattern 'acme_key' is not a valid regex: missing \), unterminated"
    ):
        Redactor(extra_patterns={"acme_key": r"acme_(\d+"})


def test_bad_pattern_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"name 'my key!'"):
        Redactor(extra_patterns={"my key!": r"x"})


def test_from_env_defaults_to_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    r = Redactor.from_env()
    assert r.enabled
    assert r.kinds == Redactor().kinds


def test_from_env_reads_extra_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLMETER_REDACT_PATTERNS", json.dumps({"acme_key": "acme_[0-9a-f]{8}"}))
    out, n = Redactor.from_env().redact_text(f"acme_0badc0de and {STRIPE}")
    assert (out, n) == ("[REDACTED:acme_key] and [REDACTED:stripe_key]", 2)


@pytest.mark.parametrize("value", ["off", "OFF", "false", "0", "no"])
def test_from_env_can_turn_redaction_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TOOLMETER_REDACT", value)
    monkeypatch.setenv("TOOLMETER_REDACT_PATTERNS", json.dumps({"acme_key": "acme_[0-9a-f]{8}"}))
    r = Redactor.from_env()
    assert not r.enabled
    text = f"acme_0badc0de {OPENAI_PROJECT}"
    assert r.redact_text(text) == (text, 0)
    assert r.redact_bytes_same_length(text.encode()) == (text.encode(), 0)


def test_from_env_rejects_an_unknown_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLMETER_REDACT", "sometimes")
    with pytest.raises(ConfigError, match=r"TOOLMETER_REDACT='sometimes' must be 'on' or 'off'"):
        Redactor.from_env()


def test_from_env_bad_regex_names_the_variable_and_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLMETER_REDACT_PATTERNS", json.dumps({"ok": "fine", "broken": "[a-z"}))
    with pytest.raises(ConfigError) as e:
        Redactor.from_env()
    assert str(e.value).startswith("TOOLMETER_REDACT_PATTERNS: redaction pattern 'broken' is not a valid regex: ")
    assert "unterminated character set" in str(e.value)


@pytest.mark.parametrize("value", ["{not json", '["a", "b"]', '{"a": 1}'])
def test_from_env_rejects_patterns_that_are_not_an_object_of_strings(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TOOLMETER_REDACT_PATTERNS", value)
    with pytest.raises(ConfigError, match="TOOLMETER_REDACT_PATTERNS"):
        Redactor.from_env()


def test_from_env_accepts_a_mapping() -> None:
    r = Redactor.from_env({"TOOLMETER_REDACT": "on", "TOOLMETER_REDACT_PATTERNS": '{"x": "xyzzy\\\\d"}'})
    assert r.redact_text("xyzzy7") == ("[REDACTED:x]", 1)


def test_secret_is_a_plain_tuple(redactor: Redactor) -> None:
    assert redactor.find(b"k=" + AWS_ID.encode()) == [Secret(2, 22, "aws_access_key_id")]


def test_extra_patterns_run_on_payloads_the_screen_passes() -> None:
    custom = Redactor(extra_patterns={"acme_key": r"acme_[0-9a-f]{8}"})
    data = b'{"key": "acme_0123abcd"}'
    assert redact._SCREEN.candidates(data) == ()
    cleaned, n = custom.redact_bytes_same_length(data)
    assert n == 1 and b"acme_0123abcd" not in cleaned and len(cleaned) == len(data)


_UNSCREENED = redact._Screen(secret_rules.BUILTIN_RULES, use_re2=False)
_PIECES = [text for _, text, _ in CASES] + NOT_SECRETS + ["\n", " ", '", "', "\\n", "=", ":", "@", "\xe9", "\ufffd"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=12), max_size=12), st.binary(max_size=4))
def test_the_screen_never_changes_what_is_found(parts: list[str], noise: bytes) -> None:
    # cases, near misses and random text glued together, with raw bytes that are not UTF-8
    data = noise.join(p.encode("utf-8", "surrogatepass") for p in parts)
    screened = Redactor().find(data)
    saved = redact._SCREEN
    try:
        redact._SCREEN = _UNSCREENED
        assert Redactor().find(data) == screened
    finally:
        redact._SCREEN = saved

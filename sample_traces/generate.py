#!/usr/bin/env python3
"""Write the sample OTLP/JSON traces that toolmeter's tests and demo replay.

Run ``python sample_traces/generate.py`` from anywhere: it rewrites
``traces-YYYY-MM-DD.json.gz`` beside this file, one per simulated day from
2026-11-09 to 2026-11-22 (UTC), then reads every file back, checks that each
``toolmeter.retained`` range reproduces the bytes its view shows, and prints the
summary figures quoted in README.md.

Each file is one OTLP ``ExportTraceServiceRequest`` in the OTLP/JSON encoding.
Everything is synthetic: a fixed seed, fixed timestamps and gzip headers with
``mtime=0``, so a rerun writes byte-identical files. Standard library only.

View layout (what the collector can rely on): a cut view is the retained pieces of
the raw result's UTF-8 bytes joined with ``PIECE_SEPARATOR``, then ``"\\n"``, then
the note, which starts with ``"[truncated: "``. So::

    body = view[: view.rfind(NOTE_MARKER)]
    body == PIECE_SEPARATOR.join(raw_bytes[s:e].decode() for s, e in retained)

Extracted documents carry ``toolmeter.truncated = true`` and no retained ranges.

Token figures written here (budget cuts, ``input_tokens`` of the model calls) use one
conservative estimate, :func:`estimate_tokens`: two UTF-8 bytes a token. o200k_base
counts 2.2-3.3 bytes a token on these payloads, so every budget cut fits its budget under
a real tokenizer, and a model call's input never reads smaller than the views before it.
The orders adapter is the exception by design: it cuts ``search_orders`` results at
:data:`ROW_CAPS` rows, not at its budget, so its views stay within the budget
until the schema change and go over it afterwards.
"""

from __future__ import annotations

import calendar
import gzip
import hashlib
import html
import json
import random
import string
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 20261109
FIRST_DAY = date(2026, 11, 9)
DAY_COUNT = 14
SCHEMA_CHANGE_DAY = date(2026, 11, 16)
"""From this day on every order object carries ``raw_payload``."""
ADAPTER_UPGRADE_DAY = date(2026, 11, 14)
"""From this day on support-agent 2.4.0 keeps rows that need attention past the head."""

OUT_DIR = Path(__file__).resolve().parent

PIECE_SEPARATOR = "\n[...]\n"
"""Joins the retained pieces of a cut view."""
NOTE_MARKER = "\n[truncated: "
"""Starts the note that ends every cut or extracted view."""

MAX_COMPRESSED_BYTES = 6_000_000
MAX_RAW_BYTES = 80_000_000

ALNUM = string.ascii_letters + string.digits
K8S_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

KIND_INTERNAL = 1
KIND_CLIENT = 3
STATUS_OK = 1
STATUS_ERROR = 2

# ----------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


BYTES_PER_TOKEN = 2
"""Conservative: real tokenizers find more bytes per token in JSON, logs and HTML."""
FILL_SHARE = 0.9
"""Adapters fill at most this share of a budget (by the estimate): a margin for dense numeric text."""


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at :data:`BYTES_PER_TOKEN`, rounded up."""
    return -(-utf8_len(text) // BYTES_PER_TOKEN)


def day_start_ns(day: date) -> int:
    return calendar.timegm(day.timetuple()) * 1_000_000_000


def iso_ms(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=secs)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{rem // 1_000_000:03d}Z"


def iso_s(ns: int) -> str:
    secs = ns // 1_000_000_000
    stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=secs)
    return f"{stamp:%Y-%m-%dT%H:%M:%SZ}"


def rand_str(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def rand_hex(rng: random.Random, n: int) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    return ",".join(f"{start}-{end}" for start, end in ranges)


def cut_view(raw: str, ranges: list[tuple[int, int]], note: str) -> str:
    """The model-facing text of a cut: retained pieces, separator between them, note last."""
    data = raw.encode("utf-8")
    pieces = [data[start:end].decode("utf-8") for start, end in ranges]
    return PIECE_SEPARATOR.join(pieces) + "\n" + note


def array_layout(row_texts: list[str], pretty: bool) -> tuple[str, list[tuple[int, int]]]:
    """Join serialised rows into a JSON array and return each row's UTF-8 byte span.

    Compact output equals ``json.dumps(rows, ensure_ascii=False)``; pretty output equals
    ``json.dumps(rows, indent=2, ensure_ascii=False)`` (rows pre-indented by the caller).
    """
    if not row_texts:
        return "[]", []
    opener, joiner, closer = ("[\n", ",\n", "\n]") if pretty else ("[", ", ", "]")
    spans: list[tuple[int, int]] = []
    pos = len(opener)
    for i, text in enumerate(row_texts):
        if i:
            pos += len(joiner)
        size = utf8_len(text)
        spans.append((pos, pos + size))
        pos += size
    return opener + joiner.join(row_texts) + closer, spans


def pretty_row(row: Any) -> str:
    """A row as ``json.dumps(rows, indent=2)`` prints it inside the array."""
    return "  " + json.dumps(row, indent=2, ensure_ascii=False).replace("\n", "\n  ")


# ----------------------------------------------------------------------------------
# What a tool call produced and what the model was shown
# ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    raw: str
    shape: str
    budget: int | None = None
    view: str | None = None
    retained: list[tuple[int, int]] | None = None
    error: str | None = None
    error_type: str | None = None
    duration_ms: float = 0.0
    mime: str = "application/json"

    @property
    def shown(self) -> str:
        return self.view if self.view is not None else self.raw


def head_cut(
    raw: str,
    spans: list[tuple[int, int]],
    budget_tokens: int,
    note_for: Callable[[int], str],
    extra: list[tuple[int, int]] | None = None,
) -> tuple[str, list[tuple[int, int]]]:
    """Keep the first N rows (plus optional extra pieces) so the view fits the budget."""
    limit = int(budget_tokens * BYTES_PER_TOKEN * FILL_SHARE)
    extra = extra or []
    extra_bytes = sum(e - s + len(PIECE_SEPARATOR) for s, e in extra)

    def size(n: int) -> int:
        return spans[n - 1][1] + extra_bytes + 1 + utf8_len(note_for(n))

    lo, hi = 1, len(spans)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    ranges = [(0, spans[lo - 1][1]), *extra]
    view = cut_view(raw, ranges, note_for(lo))
    assert estimate_tokens(view) <= budget_tokens or lo == 1
    return view, ranges


# ----------------------------------------------------------------------------------
# The order store behind search_orders and get_customer_orders
# ----------------------------------------------------------------------------------

FIRST_NAMES = [
    "Anna",
    "Lukas",
    "Zoë",
    "Mateo",
    "Chloé",
    "Noah",
    "Maja",
    "Oliver",
    "Léa",
    "Jonas",
    "Sofía",
    "Emil",
    "Ingrid",
    "Łukasz",
    "Amélie",
    "Björn",
    "Nora",
    "Tomás",
    "Hannah",
    "Yusuf",
    "Camille",
    "Finn",
    "Marta",
    "João",
    "Elif",
    "Liam",
    "Ines",
    "Rafael",
    "Greta",
    "Søren",
    "Aiko",
    "Daniel",
    "Priya",
    "Olivia",
    "Kacper",
    "Sara",
    "Hugo",
    "Mia",
    "Arjun",
]
LAST_NAMES = [
    "Müller",
    "Schmidt",
    "Dubois",
    "García",
    "Jansen",
    "Kowalski",
    "Rossi",
    "Andersson",
    "Novak",
    "Silva",
    "de Vries",
    "Nowak",
    "Lefèvre",
    "Fernández",
    "Bakker",
    "Schäfer",
    "Martin",
    "Johansson",
    "Wójcik",
    "Costa",
    "Smith",
    "Brown",
    "Okafor",
    "Yılmaz",
    "Nielsen",
    "Moreau",
    "Hoffmann",
    "Pereira",
    "Lindqvist",
    "Walsh",
    "Kim",
    "Patel",
]
COUNTRIES = [
    ("DE", "EUR", ["Berlin", "München", "Hamburg", "Köln", "Leipzig"], 17),
    ("FR", "EUR", ["Paris", "Lyon", "Marseille", "Nantes"], 12),
    ("NL", "EUR", ["Amsterdam", "Rotterdam", "Utrecht", "Eindhoven"], 10),
    ("GB", "GBP", ["London", "Manchester", "Leeds", "Bristol"], 13),
    ("US", "USD", ["Chicago", "Austin", "Seattle", "New York"], 16),
    ("PL", "PLN", ["Warszawa", "Kraków", "Gdańsk", "Wrocław"], 7),
    ("ES", "EUR", ["Madrid", "Barcelona", "Sevilla", "Valencia"], 9),
    ("SE", "SEK", ["Stockholm", "Göteborg", "Malmö"], 6),
    ("BR", "BRL", ["São Paulo", "Rio de Janeiro", "Curitiba"], 5),
    ("IT", "EUR", ["Milano", "Torino", "Bologna"], 5),
]
STATUSES = [
    ("delivered", 44),
    ("shipped", 17),
    ("processing", 10),
    ("pending_payment", 6),
    ("cancelled", 7),
    ("refunded", 6),
    ("refund_requested", 4),
    ("on_hold", 3),
    ("returned", 3),
]
CARRIERS = [
    ("DHL", "DHL_EXPRESS", "JD01"),
    ("UPS", "UPS_STANDARD", "1Z9E"),
    ("PostNL", "POSTNL_PAKKET", "3SABC"),
    ("Colissimo", "COLISSIMO_HOME", "6A"),
    ("FedEx", "FEDEX_GROUND", "7749"),
]
CHANNELS = [("web", 55), ("ios", 18), ("android", 15), ("marketplace", 12)]
GATEWAYS = ["stripe", "adyen", "paypal", "klarna"]

HEAVY_CUSTOMER_ID = "CUS-00042"
HEAVY_CUSTOMER_NAME = "Brightwater Supply Co."
HEAVY_ORDER_COUNT = 312
REFUND_ROW_INDEX = 117
"""0-based position of the one ``refund_pending`` order among the customer's orders (row 118, page 3)."""
CUSTOMER_PAGE_SIZE = 50
STORE_SIZE = 10_000
STORE_FIRST_NS = day_start_ns(date(2026, 5, 1))
STORE_LAST_NS = day_start_ns(date(2026, 11, 9)) - 1


def weighted(rng: random.Random, pairs: list[tuple[Any, int]]) -> Any:
    return rng.choices([p[0] for p in pairs], weights=[p[1] for p in pairs])[0]


@dataclass
class Customer:
    customer_id: str
    name: str
    email: str
    country: str
    currency: str
    city: str
    tier: str
    created_ns: int


class OrderStore:
    """10,000 synthetic orders, newest first, each pre-serialised before and after the schema change."""

    def __init__(self, rng: random.Random) -> None:
        self.customers: list[Customer] = []
        for k in range(2_400):
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            country, currency, cities, _ = weighted(rng, [(c, c[3]) for c in COUNTRIES])
            slug = f"{first}.{last}".lower().replace(" ", "")
            slug = slug.translate(str.maketrans("äöüëéèçñóáãíłńśćøåőıą", "aoueeecnoaailnscoaoia"))
            self.customers.append(
                Customer(
                    customer_id=f"CUS-{k + 100:05d}",
                    name=f"{first} {last}",
                    email=f"{slug}{rng.randint(1, 99)}@example.com",
                    country=country,
                    currency=currency,
                    city=rng.choice(cities),
                    tier=weighted(rng, [("standard", 80), ("plus", 15), ("business", 5)]),
                    created_ns=rng.randint(day_start_ns(date(2021, 1, 1)), STORE_FIRST_NS),
                )
            )
        self.heavy = Customer(
            HEAVY_CUSTOMER_ID,
            HEAVY_CUSTOMER_NAME,
            "accounts@brightwater-supply.example",
            "NL",
            "EUR",
            "Rotterdam",
            "business",
            day_start_ns(date(2019, 3, 4)),
        )
        self.by_id = {c.customer_id: c for c in self.customers}
        self.by_id[HEAVY_CUSTOMER_ID] = self.heavy

        owners = [self.heavy] * HEAVY_ORDER_COUNT
        owners += [rng.choice(self.customers) for _ in range(STORE_SIZE - HEAVY_ORDER_COUNT)]
        times = sorted(rng.randint(STORE_FIRST_NS, STORE_LAST_NS) for _ in range(STORE_SIZE))
        rng.shuffle(owners)
        tracking_seq = {code: rng.randint(10**7, 9 * 10**7) for _, code, _ in CARRIERS}

        rows = []
        for seq, (owner, created) in enumerate(zip(owners, times, strict=False), start=1):
            status = weighted(rng, STATUSES)
            carrier, code, prefix = rng.choice(CARRIERS)
            tracking_seq[code] += rng.randint(1, 40)
            shipped = status in ("shipped", "delivered", "returned", "refunded", "refund_requested")
            total = round(rng.lognormvariate(4.1, 0.7) * (4 if owner is self.heavy else 1), 2)
            rows.append(
                {
                    "order_id": f"ORD-{seq + 2_000_000:07d}",
                    "customer_id": owner.customer_id,
                    "customer_name": owner.name,
                    "email": owner.email,
                    "status": status,
                    "total": total,
                    "currency": owner.currency,
                    "item_count": rng.randint(1, 6) * (3 if owner is self.heavy else 1),
                    "created_at": iso_s(created),
                    "updated_at": iso_s(min(created + rng.randint(60, 9 * 86_400) * 1_000_000_000, STORE_LAST_NS)),
                    "shipping_country": owner.country,
                    "shipping_city": owner.city,
                    "carrier": carrier,
                    "tracking_number": f"{prefix}{tracking_seq[code]:010d}" if shipped else None,
                    "channel": weighted(rng, CHANNELS),
                }
            )
        rows.reverse()  # newest first, as the API lists them
        heavy_rows = [i for i, r in enumerate(rows) if r["customer_id"] == HEAVY_CUSTOMER_ID]
        refund = rows[heavy_rows[REFUND_ROW_INDEX]]
        refund.update(
            status="refund_pending", carrier="DHL", tracking_number="JD010482277315", updated_at="2026-10-29T08:41:17Z"
        )
        self.rows = rows
        self.heavy_rows = heavy_rows
        self.refund_order_id = refund["order_id"]
        self.text_v1 = [json.dumps(r, ensure_ascii=False) for r in rows]
        self.text_v2 = [json.dumps({**r, "raw_payload": self._raw_payload(rng, r)}, ensure_ascii=False) for r in rows]
        self.mean_row_tokens: dict[bool, int] = {
            after: -(-(sum(map(utf8_len, texts)) // len(texts) + 2) // BYTES_PER_TOKEN)
            for after, texts in ((False, self.text_v1), (True, self.text_v2))
        }

    @staticmethod
    def _raw_payload(rng: random.Random, row: dict[str, Any]) -> str:
        # Templated and mostly constant so it compresses well; a few ids vary per order.
        code = next(c for name, c, _ in CARRIERS if name == row["carrier"])
        return (
            '{"source":"storefront","topic":"orders/updated","api_version":"2026-10",'
            f'"order_ref":"{row["order_id"]}","checkout_token":"ck_{rand_hex(rng, 10)}",'
            f'"gateway":"{rng.choice(GATEWAYS)}","payment_ref":"pay_{rand_hex(rng, 12)}",'
            f'"line_items":[{{"sku":"SKU-{rng.randint(10000, 10999)}","qty":{row["item_count"]},'
            f'"unit_price":"{row["total"] / row["item_count"]:.2f}"}}],'
            f'"shipping_line":{{"code":"{code}","price":"4.90"}},'
            '"tax_lines":[{"title":"VAT","rate":"0.19"}],"discount_codes":[],'
            f'"received_at":"{row["updated_at"]}"}}'
        )

    def texts(self, indexes: list[int], day: date) -> list[str]:
        source = self.text_v2 if day >= SCHEMA_CHANGE_DAY else self.text_v1
        return [source[i] for i in indexes]

    def row_tokens(self, day: date) -> int:
        """Estimated tokens of an average order on ``day``, with its separator."""
        return self.mean_row_tokens[day >= SCHEMA_CHANGE_DAY]

    def query(self, args: dict[str, Any]) -> list[int]:
        out = []
        for i, r in enumerate(self.rows):
            if "status" in args and r["status"] != args["status"]:
                continue
            if "shipping_country" in args and r["shipping_country"] != args["shipping_country"]:
                continue
            if "channel" in args and r["channel"] != args["channel"]:
                continue
            if "customer_id" in args and r["customer_id"] != args["customer_id"]:
                continue
            if "created_after" in args and r["created_at"] < args["created_after"]:
                continue
            if "min_total" in args and r["total"] < args["min_total"]:
                continue
            out.append(i)
        if "limit" in args:
            out = out[: args["limit"]]
        return out


# ----------------------------------------------------------------------------------
# Articles behind fetch_webpage (synthetic text, rendered as page HTML and as markdown)
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    heading: str
    paragraphs: tuple[str, ...]
    bullets: tuple[str, ...] = ()
    code: tuple[str, str] | None = None  # (language, text)
    links: tuple[tuple[str, str], ...] = ()  # (text, url)
    table: tuple[tuple[str, ...], ...] = ()  # header row first


@dataclass(frozen=True)
class Article:
    site: str
    path: str
    title: str
    intro: str
    sections: tuple[Section, ...]


ARTICLES: dict[str, Article] = {
    a.path: a
    for a in (
        Article(
            "runbooks",
            "/kubernetes/crashloopbackoff",
            "CrashLoopBackOff: the first fifteen minutes",
            "A pod in `CrashLoopBackOff` starts, exits and is started again, and the kubelet waits longer "
            "after each failure, up to five minutes. The restart count says how long this has gone on; the "
            "previous container's logs usually say why.",
            (
                Section(
                    "Read the last termination first",
                    (
                        "The current container may not have logged anything yet. Ask for the previous one and for its "
                        "exit code before reading anything else.",
                    ),
                    (
                        "Exit code 137: the process got SIGKILL, from the OOM killer or after a failed liveness probe.",
                        "Exit code 1 or 2: the application gave up on its own, and its last lines say why.",
                        "Exit code 143: SIGTERM, usually a probe or a rollout stopping the container.",
                    ),
                    (
                        "bash",
                        "kubectl -n $NS get pod $POD -o jsonpath='{.status.containerStatuses[0].lastState.terminated}'\n"
                        "kubectl -n $NS logs $POD --previous --tail=300",
                    ),
                ),
                Section(
                    "Look for what changed",
                    (
                        "Most loops start with a rollout. Compare the image, the config map revision and the referenced "
                        "secrets with the last revision that stayed up.",
                        "A missing secret key fails at start-up with a message that is easy to overlook between the "
                        "framework's banners.",
                    ),
                    (),
                    (
                        "bash",
                        "kubectl -n $NS rollout history deploy/$APP\n"
                        "kubectl -n $NS rollout undo deploy/$APP --to-revision=$LAST_GOOD",
                    ),
                ),
                Section(
                    "Probes that restart slow starters",
                    (
                        "A liveness probe that begins before the application has warmed up will kill a healthy but slow "
                        "process. Give slow initialisation a `startupProbe`, so that liveness only starts counting once "
                        "the app is up.",
                    ),
                ),
                Section(
                    "When nothing changed",
                    (
                        "If no rollout preceded the loop, look at what the container reaches during start-up: the "
                        "database, the secret store, DNS. A dependency that answers slowly turns a normal start into a "
                        "timeout, and the timeout into a restart.",
                    ),
                ),
            ),
        ),
        Article(
            "runbooks",
            "/databases/connection-pool-exhausted",
            "Connection pool exhausted",
            "When every connection in the pool is checked out, new requests wait for one to come back and fail "
            "once the wait exceeds the pool's timeout. The database itself is often healthy while this happens.",
            (
                Section(
                    "Confirm it is the pool",
                    (
                        "Pool timeouts appear as `SQLTransientConnectionException` in JVM services and as `QueuePool "
                        "limit reached` in SQLAlchemy. Check the pool's active, idle and waiting counts at the moment of "
                        "the error; the log line usually carries them.",
                    ),
                    ("active equal to the maximum pool size", "idle at zero", "a growing number of waiting threads"),
                ),
                Section(
                    "Find who holds the connections",
                    (
                        "Long transactions hold a connection for their whole duration. Ask the database for sessions "
                        "that have sat idle inside a transaction for more than a few seconds.",
                    ),
                    (),
                    (
                        "sql",
                        "SELECT pid, usename, state, now() - xact_start AS open_for, left(query, 80) AS query\n"
                        "FROM pg_stat_activity\nWHERE state = 'idle in transaction'\nORDER BY open_for DESC;",
                    ),
                ),
                Section(
                    "Short-term relief, lasting fix",
                    (
                        "Raising the pool size buys time only if the database has headroom, and every replica multiplies "
                        "the number of connections. The lasting fix is to shorten what runs inside a transaction, most "
                        "often a remote call made while a row lock is held.",
                    ),
                ),
            ),
        ),
        Article(
            "runbooks",
            "/networking/dns-timeouts",
            "DNS lookups timing out inside the cluster",
            "Lookups that intermittently take five seconds, or fail with `i/o timeout`, usually come from the "
            "path between the pod and CoreDNS rather than from CoreDNS itself.",
            (
                Section(
                    "Reproduce from the pod",
                    (
                        "Run the lookup from a debug container in the same pod, so that it uses the same resolver "
                        "configuration. Time several attempts: a five-second pattern points at dropped UDP packets and "
                        "the resolver's retry.",
                    ),
                    (),
                    (
                        "bash",
                        "kubectl -n $NS debug -it $POD --image=busybox:1.36 -- sh\n"
                        "for i in $(seq 1 20); do time nslookup orders-db.$NS.svc.cluster.local; done",
                    ),
                ),
                Section(
                    "Search paths multiply queries",
                    (
                        "With the default `ndots:5`, a name with fewer than five dots is tried against every search "
                        "domain before it is tried as written, so one external hostname can cost four or five queries.",
                    ),
                    (
                        "write external names with a trailing dot",
                        "lower ndots in the pod's dnsConfig",
                        "cache lookups in the client where the runtime allows it",
                    ),
                ),
                Section(
                    "Check CoreDNS capacity",
                    (
                        "Look at CoreDNS's request rate, its error responses and its CPU throttling. Two replicas are "
                        "rarely enough for a busy cluster, and a throttled CoreDNS answers slowly to everyone.",
                    ),
                ),
            ),
        ),
        Article(
            "runbooks",
            "/kubernetes/oomkilled",
            "Containers killed with OOMKilled",
            "A container that goes over its memory limit is killed by the kernel, and Kubernetes records the "
            "reason as `OOMKilled` with exit code 137. The application gets no chance to log the cause.",
            (
                Section(
                    "Compare usage with the limit",
                    (
                        "Read the limit from the pod spec and the working set from the metrics just before the kill. A "
                        "sawtooth that climbs between restarts is a leak; a flat line with sudden spikes is a request "
                        "that loads too much at once.",
                    ),
                    (),
                    (
                        "bash",
                        "kubectl -n $NS describe pod $POD | grep -A3 'Last State'\n"
                        "kubectl -n $NS top pod $POD --containers",
                    ),
                ),
                Section(
                    "Runtimes that ignore the limit",
                    (
                        "Older JVMs sized their heap from the node's memory instead of the container's. Size the heap as "
                        "a share of the container limit and leave room for metaspace, threads and direct buffers.",
                    ),
                    (
                        "-XX:MaxRAMPercentage=70",
                        "a memory limit at least a quarter above the expected heap",
                        "requests equal to limits for latency-sensitive services",
                    ),
                ),
                Section(
                    "Find the request that spikes",
                    (
                        "Match the kill time against the access log. An export endpoint, or a query without a limit that "
                        "reads a whole table into memory, is the usual suspect.",
                    ),
                ),
            ),
        ),
        Article(
            "runbooks",
            "/networking/expired-certificates",
            "Expired certificates on the ingress",
            "Clients that suddenly fail with `x509: certificate has expired` while the service is healthy point "
            "at the certificate the ingress serves, not at the application.",
            (
                Section(
                    "Check what is actually served",
                    (
                        "Ask the endpoint for its certificate instead of trusting the secret: the ingress may still serve "
                        "an old copy.",
                    ),
                    (),
                    (
                        "bash",
                        "echo | openssl s_client -connect shop.example.com:443 -servername shop.example.com \\\n"
                        "  | openssl x509 -noout -subject -enddate",
                    ),
                ),
                Section(
                    "Why renewal stopped",
                    (
                        "Renewal usually stops because the challenge cannot complete: a changed DNS record, a firewall "
                        "rule in front of the HTTP-01 path, or an issuer whose credentials expired. The certificate's "
                        "events say which.",
                    ),
                    (
                        "kubectl describe certificate $NAME",
                        "kubectl get challenges -A",
                        "the issuer's status conditions",
                    ),
                ),
                Section(
                    "Prevent the next one",
                    (
                        "Alert when a served certificate has fewer than fourteen days left, measured from outside the "
                        "cluster.",
                    ),
                ),
            ),
        ),
        Article(
            "docs",
            "/guides/tracing/tool-calls",
            "Recording tool calls as spans",
            "An agent's tool calls are ordinary operations with inputs, outputs and a duration, which makes them "
            "a natural fit for spans. The GenAI semantic conventions name the attributes, so traces from "
            "different frameworks can be read by the same tools.",
            (
                Section(
                    "One span per call",
                    (
                        "Open a span named `execute_tool {tool}` around each invocation, as a child of the agent span that "
                        "issued it. Record the tool's name and the call id the model generated, so the result can be "
                        "joined to the request that asked for it.",
                    ),
                    (),
                    (
                        "python",
                        'with tracer.start_as_current_span(f"execute_tool {name}") as span:\n'
                        '    span.set_attribute("gen_ai.operation.name", "execute_tool")\n'
                        '    span.set_attribute("gen_ai.tool.name", name)\n'
                        '    span.set_attribute("gen_ai.tool.call.id", call_id)\n'
                        "    result = registry[name](**arguments)",
                    ),
                ),
                Section(
                    "Arguments and results are opt-in",
                    (
                        "Arguments and results may hold personal data and can be very large, so instrumentations leave "
                        "them off by default. When you turn them on, remember that exporters apply attribute length "
                        "limits: a long result may arrive cut to a few hundred characters.",
                    ),
                    (
                        "record sizes as separate numeric attributes",
                        "keep the full payload in a store the trace points to",
                        "redact before recording, not after",
                    ),
                ),
                Section(
                    "Errors belong on the span",
                    (
                        "Set the span status to error when a tool fails or times out, and record the error type. A trace "
                        "in which a failed call looks like an empty result misleads both the reader and the model.",
                    ),
                ),
            ),
        ),
        Article(
            "blog",
            "/2026/10/cursor-pagination-for-agent-tools",
            "Cursor pagination for tools that return lists",
            "A list endpoint that returns everything works in a demo and fails in production, where the same "
            "query matches thousands of rows. For a tool called by a model the failure is quiet: the result is "
            "appended to the context, and every later turn pays for it.",
            (
                Section(
                    "Cap by default",
                    (
                        "Give the tool a default limit that fits its budget, and a maximum it refuses to exceed. Report "
                        "the total number of matches next to the returned rows, so the model knows what it is not seeing.",
                    ),
                ),
                Section(
                    "Cursors instead of offsets",
                    (
                        "An opaque cursor survives inserts between pages and lets the server change its strategy later. "
                        "Offsets are easier to reason about, but they skip or repeat rows when the data moves underneath.",
                    ),
                    (),
                    (
                        "json",
                        '{\n  "items": ["..."],\n  "returned": 50,\n  "total": 3120,\n'
                        '  "next_cursor": "b3JkZXJzOjUw"\n}',
                    ),
                ),
                Section(
                    "Say what was cut",
                    (
                        "When a result is shortened, end it with a line that says how many items were shown out of how "
                        "many, and how to get the rest. A list that simply stops looks complete.",
                    ),
                ),
            ),
        ),
        Article(
            "notes",
            "/llm/prompt-caching-limits",
            "What prompt caching does and does not save",
            "Prompt caching lets a provider reuse the processed prefix of a request when the next request starts "
            "with the same tokens. It lowers the price and latency of long, stable prefixes; it does not make "
            "them any smaller.",
            (
                Section(
                    "What is cached",
                    (
                        "The cache covers an exact prefix: system prompt, tool definitions and the earlier turns. A tool "
                        "result that arrives on turn three becomes part of the prefix for turn four and every turn after.",
                    ),
                ),
                Section(
                    "Where it stops helping",
                    (
                        "Cached tokens still occupy the context window. A large result that is cheap to re-read still "
                        "pushes older instructions away from the end of the prompt and still counts towards the limit.",
                    ),
                    (
                        "window occupancy is unchanged by caching",
                        "an edit to an early turn invalidates the cache from that point on",
                        "cache lifetimes are minutes, so slow agents miss it",
                    ),
                ),
                Section(
                    "Measure both",
                    (
                        "Track cached and uncached input tokens separately, and track the size of each tool result. The "
                        "first tells you what you pay; the second tells you what the model has to read.",
                    ),
                ),
            ),
        ),
        Article(
            "docs",
            "/guides/apis/schema-drift",
            "Noticing when an API response changes shape",
            "Upstream services add fields without announcing it. For a human client that is harmless; for an "
            "agent that forwards responses into a prompt, a new field on every row can double each result "
            "overnight.",
            (
                Section(
                    "Fingerprint the schema",
                    (
                        "Derive a schema from each JSON response: its key paths and their value types, without the values. "
                        "Hash it. A new hash for the same tool is a schema change, whatever the size.",
                    ),
                    (),
                    (
                        "python",
                        'def key_paths(value, prefix="$"):\n    if isinstance(value, dict):\n'
                        "        for key, item in value.items():\n"
                        '            yield from key_paths(item, f"{prefix}.{key}")\n'
                        "    elif isinstance(value, list):\n        for item in value[:20]:\n"
                        '            yield from key_paths(item, f"{prefix}[]")\n'
                        "    else:\n        yield prefix, type(value).__name__",
                    ),
                ),
                Section(
                    "Watch the tail, not the mean",
                    (
                        "A change that only affects large results barely moves the average. Plot the 99th percentile of "
                        "result size per tool and day, and mark the days on which the fingerprint changed.",
                    ),
                ),
                Section(
                    "Decide at the boundary",
                    (
                        "When a new field appears, the adapter can drop it, summarise it or let it through. Make that a "
                        "decision someone takes, not the consequence of nobody looking.",
                    ),
                ),
            ),
        ),
        Article(
            "blog",
            "/2026/09/per-tool-token-budgets",
            "Per-tool token budgets",
            "A single limit for every tool result is too generous for lookups and too tight for documents. A "
            "budget per tool, enforced where results join the conversation, keeps each result within what it is "
            "worth.",
            (
                Section(
                    "Pick a number per tool",
                    (
                        "Start from the sizes you observe. A record lookup needs a few hundred tokens, a log search a few "
                        "thousand, a list query as many as the rows the model actually reads.",
                    ),
                    (
                        "lookups: 500 tokens",
                        "log excerpts: 8,000 tokens",
                        "list queries: 10,000 to 25,000 tokens",
                        "documents: extract first, then budget",
                    ),
                ),
                Section(
                    "Cut by shape",
                    (
                        "Lists keep their first rows and a count. Logs keep the head and the tail, where start-up errors "
                        "and the final failure live. Documents are reduced to their main text before any cut. Records are "
                        "projected to the fields that matter.",
                    ),
                ),
                Section(
                    "Keep the evidence",
                    (
                        "Store the full result and put a reference in the note, with the byte ranges the view kept. When "
                        "an answer is wrong, you can check whether the fact it needed was ever shown.",
                    ),
                ),
            ),
        ),
    )
}
SRE_PAGES = [p for p, a in ARTICLES.items() if a.site == "runbooks"]
RESEARCH_PAGES = [p for p, a in ARTICLES.items() if a.site != "runbooks"]

SITES = {
    # key: (host, site title, (min bytes, max bytes) of the whole page)
    "runbooks": ("runbooks.example.com", "Platform Runbooks", (34_000, 64_000)),
    "docs": ("docs.example.dev", "Example Developer Docs", (60_000, 300_000)),
    "blog": ("blog.example.org", "Field Notes", (40_000, 100_000)),
    "notes": ("notes.example.net", "Engineering Notes", (30_000, 70_000)),
}
WORDS = [
    "account",
    "alerts",
    "api",
    "archive",
    "auth",
    "billing",
    "cache",
    "cluster",
    "config",
    "deploy",
    "events",
    "export",
    "gateway",
    "guides",
    "ingress",
    "jobs",
    "metrics",
    "network",
    "nodes",
    "queue",
    "quotas",
    "release",
    "search",
    "secrets",
    "storage",
    "streams",
    "tokens",
    "traces",
    "users",
    "webhooks",
]


def _inline_html(text: str) -> str:
    parts = text.split("`")
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


EXAMPLES: dict[str, Section] = {
    "/kubernetes/crashloopbackoff": Section(
        "Example",
        (
            "A container that fails on a missing secret key looks like this: a short run, exit code 1, and the "
            "reason on the last line of the previous container's log.",
        ),
        (),
        (
            "text",
            "NAME                           READY   STATUS             RESTARTS        AGE\n"
            "checkout-api-7d9f8c6b5-x2kqp   0/1     CrashLoopBackOff   14 (2m ago)     47m\n\n"
            "lastState:\n  terminated:\n    exitCode: 1\n    reason: Error\n"
            '    startedAt: "2026-11-02T08:14:03Z"\n    finishedAt: "2026-11-02T08:14:05Z"\n\n'
            'Error: secret "checkout-db" does not contain key "password"',
        ),
    ),
    "/databases/connection-pool-exhausted": Section(
        "Example",
        (
            "The pool's own statistics line usually precedes the first timeout by a few seconds. Here every "
            "connection is in use and fifty-seven threads are queued behind them.",
        ),
        (),
        (
            "text",
            "HikariPool-1 - Pool stats (total=20, active=20, idle=0, waiting=57)\n"
            "HikariPool-1 - Connection is not available, request timed out after 30000ms\n"
            "Unable to acquire JDBC Connection; nested exception is SQLTransientConnectionException",
        ),
    ),
    "/networking/dns-timeouts": Section(
        "Example",
        (
            "Twenty lookups from the same pod: most answer in milliseconds, and the slow ones take just over five "
            "seconds, the resolver's retry interval.",
        ),
        (),
        (
            "text",
            "real 0m0.004s\nreal 0m0.003s\nreal 0m5.012s\nreal 0m0.004s\nreal 0m5.009s\n"
            ";; connection timed out; no servers could be reached",
        ),
    ),
    "/kubernetes/oomkilled": Section(
        "Example",
        ("The pod description records the kill; the metrics show how close the container ran to its limit before it.",),
        (),
        (
            "text",
            "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n"
            "      Started:      Mon, 02 Nov 2026 03:12:40 +0000\n      Finished:     Mon, 02 Nov 2026 03:58:02 +0000\n"
            "    Limits:\n      memory:  1Gi\n    Requests:\n      memory:  768Mi",
        ),
    ),
    "/networking/expired-certificates": Section(
        "Example",
        ("An expired certificate still served by the ingress after the secret was renewed:",),
        (),
        (
            "text",
            "subject=CN = shop.example.com\nnotAfter=Nov  1 23:59:59 2026 GMT\n"
            "verify error:num=10:certificate has expired",
        ),
    ),
    "/guides/tracing/tool-calls": Section(
        "Example",
        ("A recorded tool call, reduced to the attributes a reader needs to follow the conversation:",),
        (),
        (
            "json",
            '{\n  "name": "execute_tool search_orders",\n  "attributes": {\n'
            '    "gen_ai.operation.name": "execute_tool",\n    "gen_ai.tool.name": "search_orders",\n'
            '    "gen_ai.tool.call.id": "call_3k9Qx1",\n    "gen_ai.tool.call.arguments": "{\\"status\\": \\"shipped\\"}"\n'
            '  },\n  "status": {"code": "OK"}\n}',
        ),
    ),
    "/2026/10/cursor-pagination-for-agent-tools": Section(
        "Example",
        ("A note that tells the model what happened and what to do next costs a line and saves a retry:",),
        (),
        (
            "text",
            "[truncated: 50 of 3,120 orders shown; narrow with status or created_after, "
            "or continue with cursor=b3JkZXJzOjUw]",
        ),
    ),
    "/llm/prompt-caching-limits": Section(
        "Example",
        (
            "Usage reported for four consecutive turns of one conversation. The cached share rises, and so does "
            "the total the model has to hold.",
        ),
        (),
        (
            "text",
            "turn  input_tokens  cached_tokens\n   1         2,410              0\n   2         9,877          2,304\n"
            "   3        34,112          9,728\n   4        35,020         33,792",
        ),
    ),
    "/guides/apis/schema-drift": Section(
        "Example",
        ("Two fingerprints of the same tool's result, a day apart. One key path was added.",),
        (),
        (
            "text",
            "2026-10-01  a41f09c2  $[].order_id:str $[].status:str $[].total:float ...\n"
            "2026-10-02  7be3d511  $[].order_id:str $[].status:str $[].total:float ... $[].raw_payload:str",
        ),
    ),
    "/2026/09/per-tool-token-budgets": Section(
        "Example",
        ("Budgets declared next to the tools they govern:",),
        (),
        (
            "yaml",
            "tools:\n  search_orders:   {shape: list, budget_tokens: 25000}\n"
            "  run_sql:         {shape: list, budget_tokens: 10000}\n"
            "  fetch_pod_logs:  {shape: diagnostic, budget_tokens: 8000}\n"
            "  fetch_webpage:   {shape: document}",
        ),
    ),
}
HISTORY_AUTHORS = ("priya-ops", "jansen-r", "lea-dubois", "mkowalczyk", "hkim-dev")


def article_sections(article: Article) -> tuple[Section, ...]:
    """The article's own sections plus the example and the blocks every page on its site carries."""
    host = SITES[article.site][0]
    siblings = [a for a in ARTICLES.values() if (a.site == "runbooks") == (article.site == "runbooks")]
    related = tuple((a.title, f"https://{SITES[a.site][0]}{a.path}") for a in siblings if a is not article)
    seed = hash_int(article.path)
    history = [("Date", "Author", "Change")] + [
        (
            f"2026-{(8, 5, 2)[k] + (seed >> (4 * k)) % 3:02d}-{1 + (seed >> (8 * k)) % 28:02d}",
            HISTORY_AUTHORS[(seed >> k) % len(HISTORY_AUTHORS)],
            change,
        )
        for k, change in enumerate(("Reviewed after incident follow-up", "Added example output", "First version"))
    ]
    extras: list[Section] = [EXAMPLES[article.path]]
    if article.site == "runbooks":
        extras.append(
            Section(
                "Before you escalate",
                (
                    "Collect these before paging the owning team, so that the first reply is about the problem rather "
                    "than about missing context.",
                ),
                (
                    "the namespace, pod and node names",
                    "when the symptom started, in UTC",
                    "the last deploy of the service and of its dependencies",
                    "the exact error line and the few lines before it",
                    "what you already tried, and what it changed",
                ),
            )
        )
        extras.append(Section("Related runbooks", (), links=related))
        extras.append(Section("Revision history", (), table=tuple(history)))
    else:
        extras.append(Section("Related reading", (), links=related))
        extras.append(
            Section("Page history", (f"Maintained at {host}; corrections are welcome.",), table=tuple(history))
        )
    return article.sections + tuple(extras)


def article_markdown(article: Article, url: str) -> str:
    lines = [f"# {article.title}", "", f"Source: {url}", "", article.intro]
    for sec in article_sections(article):
        lines += ["", f"## {sec.heading}"]
        for para in sec.paragraphs:
            lines += ["", para]
        if sec.bullets:
            lines.append("")
            lines += [f"- {b}" for b in sec.bullets]
        if sec.links:
            lines.append("")
            lines += [f"- [{text}]({href})" for text, href in sec.links]
        if sec.table:
            lines += ["", "| " + " | ".join(sec.table[0]) + " |", "|" + "---|" * len(sec.table[0])]
            lines += ["| " + " | ".join(row) + " |" for row in sec.table[1:]]
        if sec.code:
            lines += ["", f"```{sec.code[0]}", sec.code[1], "```"]
    return "\n".join(lines)


def article_html(article: Article) -> str:
    out = [
        f'<h1 class="prose__title">{html.escape(article.title)}</h1>',
        f'<p class="prose__lead">{_inline_html(article.intro)}</p>',
    ]
    for n, sec in enumerate(article_sections(article), start=1):
        anchor = f"section-{n}"
        out.append(
            f'<h2 id="{anchor}"><a class="anchor" href="#{anchor}" aria-hidden="true">#</a>'
            f"{html.escape(sec.heading)}</h2>"
        )
        out += [f"<p>{_inline_html(p)}</p>" for p in sec.paragraphs]
        if sec.bullets:
            out.append("<ul>" + "".join(f"<li>{_inline_html(b)}</li>" for b in sec.bullets) + "</ul>")
        if sec.links:
            out.append(
                '<ul class="related">'
                + "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>' for text, href in sec.links)
                + "</ul>"
            )
        if sec.table:
            head = "".join(f"<th>{html.escape(c)}</th>" for c in sec.table[0])
            rows = "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in sec.table[1:]
            )
            out.append(f'<table class="history"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
        if sec.code:
            out.append(
                f'<div class="codeblock"><button class="copy-btn" data-copy>Copy</button>'
                f'<pre><code class="language-{sec.code[0]}">{html.escape(sec.code[1])}</code></pre></div>'
            )
    return "\n".join(out)


def page_html(rng: random.Random, article: Article, target: int) -> str:
    """A full page: head, inline styles, app state, navigation, the article, footer, scripts."""
    host, site_title, _ = SITES[article.site]
    build = rand_hex(rng, 8)
    body = article_html(article)
    css: list[str] = []
    nav: list[str] = []
    state: list[str] = []
    js: list[str] = []
    words = WORDS
    # Fill the chrome around the article until the page reaches its target size.
    budget = max(target - 6_000 - utf8_len(body), 4_000)
    sizes = {"css": 0, "nav": 0, "state": 0, "js": 0}
    shares = {"css": 0.32, "nav": 0.18, "state": 0.35, "js": 0.15}
    i = 0
    while sizes["css"] < budget * shares["css"]:
        w1, w2 = words[i % 30], words[(i * 7 + 3) % 30]
        rule = (
            f".{w1}-{w2}__{['item', 'link', 'icon', 'label', 'panel'][i % 5]}"
            f"{'--active' if i % 4 == 0 else ''}{{display:{['flex', 'block', 'grid'][i % 3]};"
            f"margin:0 {i % 12}px;padding:{(i * 3) % 16}px {(i * 5) % 24}px;"
            f"color:var(--fg-{i % 9});border-radius:{i % 6}px}}"
        )
        css.append(rule)
        sizes["css"] += len(rule)
        i += 1
    i = 0
    while sizes["nav"] < budget * shares["nav"]:
        sec, page = words[i % 30], words[(i * 11 + 5) % 30]
        item = (
            f'<li class="nav-item"><a class="nav-link" href="/{sec}/{page}-{i}" '
            f'data-track="nav:{sec}:{page}">{sec.title()} {page}</a></li>'
        )
        nav.append(item)
        sizes["nav"] += len(item)
        i += 1
    i = 0
    while sizes["state"] < budget * shares["state"]:
        sec, page = words[(i * 3) % 30], words[(i * 13 + 1) % 30]
        entry = json.dumps(
            {
                "id": f"pg_{i:05d}",
                "slug": f"/{sec}/{page}-{i}",
                "title": f"{sec.title()} {page}",
                "updatedAt": f"2026-{1 + i % 10:02d}-{1 + i % 28:02d}T00:00:00Z",
                "locale": "en",
                "breadcrumbs": [sec, page],
                "weight": i % 97,
                "hidden": i % 17 == 0,
            },
            separators=(",", ":"),
        )
        state.append(entry)
        sizes["state"] += len(entry)
        i += 1
    i = 0
    while sizes["js"] < budget * shares["js"]:
        w = words[i % 30]
        fn = (
            f"function _{i:x}(e,t){{if(!e||!e.{w})return void 0;var n=t&&t.{words[(i + 9) % 30]};"
            f"return n?e.{w}.call(e,n,{i % 31}):e.{w}}}"
        )
        js.append(fn)
        sizes["js"] += len(fn)
        i += 1
    desc = html.escape(article.intro.replace("`", "")[:150])
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en" data-theme="light">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{html.escape(article.title)} | {site_title}</title>",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="description" content="{desc}">',
            f'<meta property="og:title" content="{html.escape(article.title)}">',
            f'<meta property="og:url" content="https://{host}{article.path}">',
            f'<meta name="csrf-token" content="{rand_str(rng, 43)}">',
            f'<link rel="canonical" href="https://{host}{article.path}">',
            f'<link rel="stylesheet" href="/_static/css/main.{build}.css">',
            f'<link rel="preload" as="font" href="/_static/fonts/inter-var.{build}.woff2" crossorigin>',
            "<style>",
            "\n".join(css),
            "</style>",
            f'<script>window.dataLayer=window.dataLayer||[];window.__BUILD__="{build}";'
            f'window.__REQUEST_ID__="{rand_hex(rng, 16)}";</script>',
            '<script id="__APP_STATE__" type="application/json">{"pages":[' + ",".join(state) + "]}</script>",
            "</head>",
            '<body class="layout layout--docs">',
            '<a class="skip-link" href="#main">Skip to content</a>',
            f'<header class="site-header"><a class="brand" href="/">{site_title}</a>'
            '<form class="search" action="/search"><input type="search" name="q" placeholder="Search"></form>'
            '<nav class="top-nav"><a href="/guides">Guides</a><a href="/reference">Reference</a>'
            '<a href="/changelog">Changelog</a><a href="/status">Status</a></nav></header>',
            '<div class="layout__body">',
            '<aside class="sidebar"><nav aria-label="Section navigation"><ul class="nav">',
            "\n".join(nav),
            "</ul></nav></aside>",
            '<main id="main"><article class="prose">',
            body,
            "</article>",
            '<div class="feedback">Was this page helpful? <button data-vote="yes">Yes</button>'
            '<button data-vote="no">No</button></div></main>',
            "</div>",
            f'<footer class="site-footer"><p>&copy; 2026 {site_title}</p><a href="/privacy">Privacy</a>'
            '<a href="/terms">Terms</a><a href="/cookies">Cookie settings</a></footer>',
            f'<script src="/_static/js/vendor.{build}.js" defer></script>',
            "<script>",
            ";".join(js),
            "</script>",
            "</body>",
            "</html>",
        ]
    )


# ----------------------------------------------------------------------------------
# Pod logs behind fetch_pod_logs
# ----------------------------------------------------------------------------------

LOG_APPS = {
    "checkout-api": ("shop-prod", "java"),
    "payments-worker": ("payments", "python"),
    "inventory-sync": ("shop-prod", "go"),
    "auth-gateway": ("edge", "go"),
}
JAVA_LOGGERS = [
    "c.a.checkout.web.OrderController",
    "c.a.checkout.service.CartService",
    "c.a.checkout.client.PaymentsClient",
    "o.s.web.servlet.DispatcherServlet",
    "com.zaxxer.hikari.pool.HikariPool",
    "c.a.checkout.service.PricingService",
]
ENDPOINTS = [
    "/api/v1/orders",
    "/api/v1/cart",
    "/api/v1/cart/items",
    "/api/v1/checkout",
    "/api/v1/orders/{id}",
    "/api/v1/shipping/quote",
    "/healthz",
    "/readyz",
]


def _java_line(rng: random.Random, ts: str) -> tuple[str, str]:
    level = weighted(rng, [("INFO", 82), ("DEBUG", 12), ("WARN", 5), ("ERROR", 1)])
    thread = f"nio-8080-exec-{rng.randint(1, 24)}"
    if level == "WARN":
        logger, msg = (
            "com.zaxxer.hikari.pool.HikariPool",
            (
                f"HikariPool-1 - Pool stats (total=20, active={rng.randint(15, 20)}, idle={rng.randint(0, 3)}, "
                f"waiting={rng.randint(1, 40)})"
            ),
        )
    elif level == "ERROR":
        logger, msg = (
            "c.a.checkout.client.PaymentsClient",
            (f"capture failed for order ORD-{rng.randint(2_000_001, 2_010_000)}: HTTP 502 from payments-worker"),
        )
    else:
        logger = rng.choice(JAVA_LOGGERS)
        ep = rng.choice(ENDPOINTS).replace("{id}", f"ORD-{rng.randint(2_000_001, 2_010_000)}")
        msg = (
            f"{rng.choice(['GET', 'POST', 'PUT', 'GET', 'GET'])} {ep} status={rng.choice([200, 200, 200, 201, 204, 404])} "
            f"duration={int(rng.lognormvariate(3.5, 0.8))}ms user=u_{rng.randint(10_000, 12_000)} "
            f"trace={rand_hex(rng, 8)}"
        )
    return f"{ts} {level:>5} 1 --- [{thread:>16}] {logger:<40.40} : {msg}", level


def _python_line(rng: random.Random, ts: str) -> tuple[str, str]:
    level = weighted(rng, [("INFO", 84), ("DEBUG", 10), ("WARNING", 5), ("ERROR", 1)])
    if level == "WARNING":
        msg = (
            f"payments.gateway: retrying capture pay_{rand_hex(rng, 12)} attempt={rng.randint(2, 4)} after ReadTimeout"
        )
    elif level == "ERROR":
        msg = f"payments.worker: giving up on capture pay_{rand_hex(rng, 12)} after 4 attempts"
    else:
        msg = (
            f"payments.worker.capture: captured pay_{rand_hex(rng, 12)} amount={rng.randint(5, 900)}."
            f"{rng.randint(0, 99):02d} {rng.choice(['EUR', 'EUR', 'GBP', 'USD'])} "
            f"order=ORD-{rng.randint(2_000_001, 2_010_000)} took={rng.randint(40, 1900)}ms"
        )
    return f"{ts} {level} [{rng.choice(['MainThread', 'worker-1', 'worker-2', 'worker-3'])}] {msg}", level


def _go_line(rng: random.Random, ts: str) -> tuple[str, str]:
    level = weighted(rng, [("INFO", 85), ("DEBUG", 9), ("WARN", 5), ("ERROR", 1)])
    if level == "WARN":
        msg = f'msg="slow upstream" upstream=orders-db latency_ms={rng.randint(800, 4800)} attempt={rng.randint(1, 3)}'
    elif level == "ERROR":
        msg = f'msg="sync batch failed" batch={rng.randint(1000, 9999)} err="context deadline exceeded"'
    else:
        msg = (
            f'msg="synced stock" sku=SKU-{rng.randint(10000, 10999)} warehouse={rng.choice(["RTM-1", "FRA-2", "WAW-1"])} '
            f"delta={rng.randint(-9, 9)} took={rng.randint(2, 90)}ms req={rand_hex(rng, 8)}"
        )
    return f"time={ts} level={level} {msg}", level


def _stack_trace(rng: random.Random, lang: str, ts: str) -> list[str]:
    if lang == "java":
        return [
            f"{ts} ERROR 1 --- [nio-8080-exec-{rng.randint(1, 24):>2}] o.a.c.c.C.[.[.[/].[dispatcherServlet]    : "
            "Servlet.service() for servlet [dispatcherServlet] threw exception",
            "org.springframework.dao.DataAccessResourceFailureException: Unable to acquire JDBC Connection",
            "\tat org.springframework.orm.jpa.vendor.HibernateJpaDialect.convertHibernateAccessException(HibernateJpaDialect.java:277)",
            "\tat org.springframework.orm.jpa.JpaTransactionManager.doBegin(JpaTransactionManager.java:466)",
            "\tat org.springframework.transaction.support.AbstractPlatformTransactionManager.startTransaction(AbstractPlatformTransactionManager.java:531)",
            "\tat com.acme.checkout.service.OrderService.placeOrder(OrderService.java:118)",
            "\tat com.acme.checkout.web.OrderController.create(OrderController.java:64)",
            "\t... 87 common frames omitted",
            f"Caused by: java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available, "
            f"request timed out after 30000ms (total=20, active=20, idle=0, waiting={rng.randint(20, 90)})",
            "\tat com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)",
            "\tat com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:181)",
            "\tat com.zaxxer.hikari.HikariDataSource.getConnection(HikariDataSource.java:128)",
            "\t... 95 common frames omitted",
        ]
    if lang == "python":
        return [
            f"{ts} ERROR [worker-{rng.randint(1, 3)}] payments.worker: unhandled error in capture loop",
            "Traceback (most recent call last):",
            '  File "/app/payments/worker.py", line 212, in handle_capture',
            "    result = gateway.capture(intent_id, amount)",
            '  File "/app/payments/gateway.py", line 88, in capture',
            "    resp = self._session.post(url, json=body, timeout=10)",
            '  File "/usr/local/lib/python3.12/site-packages/requests/sessions.py", line 637, in post',
            '    return self.request("POST", url, data=data, json=json, **kwargs)',
            '  File "/usr/local/lib/python3.12/site-packages/requests/adapters.py", line 713, in send',
            "    raise ReadTimeout(e, request=request)",
            "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='psp.example.net', port=443): "
            "Read timed out. (read timeout=10)",
        ]
    return [
        f'time={ts} level=ERROR msg="panic recovered" component=syncer',
        "panic: runtime error: invalid memory address or nil pointer dereference",
        f"[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x{rng.randint(0x400000, 0x7FFFFF):x}]",
        "",
        f"goroutine {rng.randint(100, 4000)} [running]:",
        f"main.(*Syncer).apply(0xc000{rand_hex(rng, 6)}, {{0x0, 0x0}})",
        "\t/src/internal/sync/apply.go:142 +0x2e",
        f"main.(*Syncer).run(0xc000{rand_hex(rng, 6)}, {{0xa1c3e8, 0xc0001a2000}})",
        "\t/src/internal/sync/run.go:77 +0x1b4",
        "created by main.main in goroutine 1",
        "\t/src/cmd/inventory-sync/main.go:58 +0x3c5",
    ]


def pod_log(
    rng: random.Random, app: str, target: int, end_ns: int, tail_trace: bool
) -> tuple[str, list[tuple[int, int]], list[bool]]:
    """Log text, each line's byte span (newline excluded), and whether each line is ERROR/WARN."""
    _, lang = LOG_APPS[app]
    make = {"java": _java_line, "python": _python_line, "go": _go_line}[lang]
    lines: list[str] = []
    flags: list[bool] = []
    size = 0
    approx_lines = max(target // 150, 100)
    step_ns = (6 * 3600 * 1_000_000_000) // approx_lines
    ns = end_ns - approx_lines * step_ns
    trace_at = sorted({rng.uniform(0.25, 0.75) for _ in range(rng.randint(1, 2))} | ({0.992} if tail_trace else set()))

    def stamp(t: int) -> str:
        text = iso_ms(t)
        return text.replace("T", " ").replace("Z", "").replace(".", ",") if lang == "python" else text

    while size < target:
        ns += rng.randint(step_ns // 4, step_ns * 7 // 4)
        if trace_at and size >= trace_at[0] * target:
            trace_at.pop(0)
            block = _stack_trace(rng, lang, stamp(ns))
            lines += block
            flags += [True] + [False] * (len(block) - 1)
            size += sum(utf8_len(b) + 1 for b in block)
            continue
        line, level = make(rng, stamp(ns))
        lines.append(line)
        flags.append(level in ("WARN", "WARNING", "ERROR"))
        size += utf8_len(line) + 1
    spans = []
    pos = 0
    for line in lines:
        n = utf8_len(line)
        spans.append((pos, pos + n))
        pos += n + 1
    return "\n".join(lines) + "\n", spans, flags


# ----------------------------------------------------------------------------------
# GitHub issues behind list_github_issues
# ----------------------------------------------------------------------------------

GH_USERS = [
    ("mkowalczyk", 4_021_337),
    ("sre-bot", 9_812_004),
    ("lea-dubois", 5_519_042),
    ("jansen-r", 7_102_388),
    ("priya-ops", 6_230_911),
    ("tomas-silva", 8_004_215),
    ("hkim-dev", 3_377_120),
    ("noah-b", 2_918_446),
    ("elif-yilmaz", 10_240_561),
]
GH_LABELS = [
    ("bug", "d73a4a", "Something isn't working"),
    ("incident", "b60205", "Production incident"),
    ("performance", "fbca04", "Latency, memory or CPU"),
    ("needs-triage", "ededed", "Not yet triaged"),
    ("enhancement", "a2eeef", "New feature or request"),
    ("observability", "0e8a16", "Traces, metrics, logs"),
    ("good first issue", "7057ff", "Good for newcomers"),
    ("regression", "e99695", "Worked before"),
]
GH_REPOS = {
    "sre-agent": ["acme-shop/checkout-api", "acme-shop/payments-worker", "acme-shop/platform-infra"],
    "research-agent": [
        "northwind-labs/agent-runtime",
        "northwind-labs/otel-genai-exporter",
        "northwind-labs/tool-adapters",
    ],
}
GH_TITLES = [
    "{svc}: p99 latency regression after {ver}",
    "Connection pool exhausted under load on {svc}",
    "Tool results over 1 MB are appended to the prompt unchanged",
    "Flaky test in {svc} retry logic",
    "OOMKilled during nightly export job",
    "Schema change in orders API doubled response size",
    "Add per-tool token budget option",
    "Spans missing gen_ai.tool.call.id when tools run in parallel",
    "DNS timeouts from {svc} pods in europe-west4",
    "Truncation note does not say how many rows were dropped",
    "Memory leak in {svc} after upgrading to {ver}",
    "Retry storm when upstream returns 429",
]


def gh_user(login: str, uid: int) -> dict[str, Any]:
    api = f"https://api.github.com/users/{login}"
    return {
        "login": login,
        "id": uid,
        "node_id": f"MDQ6VXNlcj{uid:08d}"[:20],
        "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": "Bot" if login.endswith("-bot") else "User",
        "user_view_type": "public",
        "site_admin": False,
    }


def gh_issue_body(rng: random.Random, svc: str) -> str:
    parts = [
        "### What happened",
        "",
        rng.choice(
            [
                f"Since the last deploy, `{svc}` answers slowly for a few minutes every hour and then recovers.",
                f"Requests to `{svc}` fail with a timeout while the dashboards show the database as idle.",
                "The agent appended a tool result of several hundred kilobytes and the next model call failed "
                "with a context length error.",
                "Results from the orders API grew noticeably this week; nothing changed on our side. 🚧",
            ]
        ),
        "",
        "### Steps to reproduce",
        "",
        "1. Deploy the current main branch to staging",
        f"2. Run the load profile `{rng.choice(['checkout-peak', 'steady-200rps', 'nightly-export'])}`",
        "3. Watch the error rate and p99 in the service dashboard",
        "",
    ]
    if rng.random() < 0.7:
        parts += ["### Logs", "", "```"]
        for _ in range(rng.randint(3, 14)):
            parts.append(
                f"2026-11-{rng.randint(1, 8):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                f"{rng.randint(0, 59):02d}Z WARN {svc} upstream slow latency_ms={rng.randint(900, 9000)} "
                f"req={rand_hex(rng, 12)}"
            )
        parts += ["```", ""]
    parts += [
        "### Environment",
        "",
        f"- version: {rng.randint(1, 4)}.{rng.randint(0, 19)}.{rng.randint(0, 9)}",
        f"- kubernetes: 1.{rng.randint(29, 32)}",
        f"- region: {rng.choice(['europe-west4', 'us-east1'])}",
    ]
    return "\n".join(parts)


def gh_issue(rng: random.Random, repo: str, number: int, created_ns: int) -> dict[str, Any]:
    api = f"https://api.github.com/repos/{repo}"
    svc = repo.split("/")[1]
    login, uid = rng.choice(GH_USERS)
    labels = rng.sample(GH_LABELS, rng.randint(0, 3))
    state = "closed" if rng.random() < 0.3 else "open"
    updated = created_ns + rng.randint(600, 20 * 86_400) * 1_000_000_000
    assignee = gh_user(*rng.choice(GH_USERS)) if rng.random() < 0.5 else None
    title = rng.choice(GH_TITLES).format(svc=svc, ver=f"v{rng.randint(1, 4)}.{rng.randint(0, 19)}.0")
    issue_id = 2_500_000_000 + number * 7_919 + rng.randint(0, 7_000)
    return {
        "url": f"{api}/issues/{number}",
        "repository_url": api,
        "labels_url": f"{api}/issues/{number}/labels{{/name}}",
        "comments_url": f"{api}/issues/{number}/comments",
        "events_url": f"{api}/issues/{number}/events",
        "html_url": f"https://github.com/{repo}/issues/{number}",
        "id": issue_id,
        "node_id": f"I_kwDO{rand_str(rng, 10)}",
        "number": number,
        "title": title,
        "user": gh_user(login, uid),
        "labels": [
            {
                "id": 6_000_000_000 + abs(hash_int(name)) % 900_000_000,
                "node_id": f"LA_kwDO{rand_str(rng, 12)}",
                "url": f"{api}/labels/{name.replace(' ', '%20')}",
                "name": name,
                "color": color,
                "default": name == "bug",
                "description": desc,
            }
            for name, color, desc in labels
        ],
        "state": state,
        "locked": False,
        "assignee": assignee,
        "assignees": [assignee] if assignee else [],
        "milestone": None,
        "comments": rng.randint(0, 40),
        "created_at": iso_s(created_ns),
        "updated_at": iso_s(updated),
        "closed_at": iso_s(updated) if state == "closed" else None,
        "author_association": rng.choice(["MEMBER", "CONTRIBUTOR", "NONE", "COLLABORATOR"]),
        "active_lock_reason": None,
        "sub_issues_summary": {"total": 0, "completed": 0, "percent_completed": 0},
        "body": gh_issue_body(rng, svc),
        "closed_by": None,
        "reactions": {
            "url": f"{api}/issues/{number}/reactions",
            "total_count": 0,
            "+1": 0,
            "-1": 0,
            "laugh": 0,
            "hooray": 0,
            "confused": 0,
            "heart": 0,
            "rocket": 0,
            "eyes": 0,
        },
        "timeline_url": f"{api}/issues/{number}/timeline",
        "performed_via_github_app": None,
        "state_reason": "completed" if state == "closed" else None,
    }


def hash_int(text: str) -> int:
    """A stable hash (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


# ----------------------------------------------------------------------------------
# Tools: each takes the call state and planner hints, returns (arguments, outcome)
# ----------------------------------------------------------------------------------

BUDGETS = {"search_orders": 25_000, "fetch_pod_logs": 8_000, "run_sql": 10_000}
ROW_CAPS = {"search_orders": 150}
"""Adapters that cut by row count: they keep this many rows of a longer result, whatever their
size, and never consult the budget. 150 orders are about 22k tokens (o200k_base) before the
schema change, within the 25,000-token budget, and about 44k after it, well over."""
SHAPES = {
    "search_orders": "list",
    "get_customer_orders": "list",
    "run_sql": "list",
    "list_github_issues": "list",
    "fetch_pod_logs": "diagnostic",
    "fetch_webpage": "document",
    "kubectl_describe_node": "record",
    "get_customer": "record",
    "get_shipment_status": "record",
    "get_weather": "record",
    "get_repo": "record",
}
ERRORS = {
    # tool: (status message, error.type, result text); every tool can also time out
    "search_orders": (
        "orders-api returned 503 Service Unavailable",
        "http.503",
        '{"error": "service_unavailable", "retry_after_s": 5}',
    ),
    "run_sql": (
        "canceling statement due to statement timeout",
        "QueryCanceled",
        "ERROR:  canceling statement due to statement timeout",
    ),
    "fetch_webpage": ("HTTP 403 Forbidden", "http.403", "403 Forbidden"),
    "list_github_issues": (
        "HTTP 403: API rate limit exceeded",
        "http.403",
        '{"message": "API rate limit exceeded for installation.", '
        '"documentation_url": "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"}',
    ),
    "fetch_pod_logs": ("pod not found", "NotFound", 'Error from server (NotFound): pods "{pod}" not found'),
}


@dataclass
class CallState:
    rng: random.Random
    day: date
    store: OrderStore
    service: str
    call_ns: int
    room_tokens: int
    keeps_matches: bool


def new_ref(rng: random.Random) -> str:
    return f"res_{rand_hex(rng, 12)}"


def tool_search_orders(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    if "args" in hints:
        args = dict(hints["args"])
    else:
        args = {}
        for _ in range(80):
            if rng.random() < 0.12:
                args = {"customer_id": rng.choice(st.store.customers).customer_id}
                if st.store.query(args):  # a customer from a ticket has orders
                    break
                continue
            keys = rng.sample(
                ["status", "shipping_country", "created_after", "min_total", "channel"], rng.choice([1, 2, 2, 3])
            )
            args = {}
            for key in ["status", "shipping_country", "channel", "created_after", "min_total"]:
                if key not in keys:
                    continue
                if key == "status":
                    args[key] = weighted(rng, STATUSES)
                elif key == "shipping_country":
                    args[key] = weighted(rng, [(c[0], c[3]) for c in COUNTRIES])
                elif key == "channel":
                    args[key] = weighted(rng, CHANNELS)
                elif key == "created_after":
                    args[key] = f"2026-{rng.randint(7, 10):02d}-{rng.choice([1, 15]):02d}"
                else:
                    args[key] = rng.choice([100, 150, 250, 400])
            n = len(st.store.query(args))
            if 20 <= n <= 400 and (n <= 120 or rng.random() < 0.3):
                break
    if not hints.get("story") and "limit" not in args:
        # With a large result already in its window, the agent asks for fewer rows.
        row_tokens = st.store.row_tokens(st.day)
        if ROW_CAPS["search_orders"] * row_tokens > st.room_tokens:
            args["limit"] = 50 if 50 * row_tokens <= st.room_tokens // 2 else 25
    rows = st.store.query(args)
    matched = len(st.store.query({k: v for k, v in args.items() if k != "limit"}))
    raw, spans = array_layout(st.store.texts(rows, st.day), pretty=False)
    budget = BUDGETS["search_orders"]
    out = Outcome(raw=raw, shape="list", budget=budget, duration_ms=70 + len(rows) * 0.4 + rng.uniform(0, 120))
    cap = ROW_CAPS["search_orders"]
    if len(rows) > cap:
        # The adapter counts rows, not tokens: the first `cap` rows and a note, however large they are.
        ref, cursor = new_ref(rng), rand_str(rng, 16)
        note = (
            f"[truncated: first {cap:,} of {len(rows):,} orders shown ({matched:,} matched; this tool returns "
            f"at most {cap:,} rows); the full result is {utf8_len(raw):,} bytes; narrow with status, "
            f"shipping_country, created_after or customer_id, or continue with cursor={cursor}; "
            f"full result ref={ref}]"
        )
        out.retained = [(0, spans[cap - 1][1])]
        out.view = cut_view(raw, out.retained, note)
    return args, out


def tool_get_customer_orders(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    store = st.store
    page = hints.get("page")
    args: dict[str, Any] = {"customer_id": HEAVY_CUSTOMER_ID, "page_size": CUSTOMER_PAGE_SIZE}
    rows = store.heavy_rows
    if page is not None:
        args["page"] = page
        rows = rows[(page - 1) * CUSTOMER_PAGE_SIZE : page * CUSTOMER_PAGE_SIZE]
    raw, spans = array_layout(store.texts(rows, st.day), pretty=False)
    out = Outcome(raw=raw, shape="list", duration_ms=rng.uniform(180, 420) + len(rows) * 1.5)
    if page is None:
        total = len(rows)
        pages = -(-total // CUSTOMER_PAGE_SIZE)
        ref = new_ref(rng)
        ranges = [(0, spans[CUSTOMER_PAGE_SIZE - 1][1])]
        if st.keeps_matches:
            ranges.append(spans[REFUND_ROW_INDEX])
            note = (
                f"[truncated: {CUSTOMER_PAGE_SIZE + 1} of {total} orders shown: page 1 of {pages} "
                f"(rows 1-{CUSTOMER_PAGE_SIZE}) and row {REFUND_ROW_INDEX + 1}, the only order with status "
                f"refund_pending; request page=2..{pages} for the rest; full result ref={ref}]"
            )
        else:
            note = (
                f"[truncated: {CUSTOMER_PAGE_SIZE} of {total} orders shown (page 1 of {pages}, page size "
                f"{CUSTOMER_PAGE_SIZE}); call get_customer_orders with page=2 for the next "
                f"{CUSTOMER_PAGE_SIZE}; full result ref={ref}]"
            )
        out.view, out.retained = cut_view(raw, ranges, note), ranges
    return args, out


def tool_fetch_pod_logs(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    app = hints.get("app") or rng.choice(list(LOG_APPS))
    namespace = LOG_APPS[app][0]
    pod = f"{app}-{rand_str(rng, 10, K8S_ALPHABET)}-{rand_str(rng, 5, K8S_ALPHABET)}"
    target = hints.get("bytes") or int(
        weighted(
            rng,
            [
                (rng.uniform(50_000, 80_000), 78),
                (rng.uniform(80_000, 200_000), 17),
                (rng.uniform(200_000, 500_000), 5),
            ],
        )
    )
    args = {"namespace": namespace, "pod_name": pod, "container": app, "since": "6h", "timestamps": True}
    raw, lines, flags = pod_log(rng, app, target, st.call_ns - 2_000_000_000, rng.random() < 0.4)
    budget = BUDGETS["fetch_pod_logs"]
    out = Outcome(
        raw=raw,
        shape="diagnostic",
        budget=budget,
        mime="text/plain",
        duration_ms=150 + utf8_len(raw) / 1_000_000 * 2_400 + rng.uniform(0, 200),
    )
    limit = int(budget * BYTES_PER_TOKEN * FILL_SHARE)
    ref = new_ref(rng)
    n = len(lines)
    head = 0
    while lines[head][1] <= limit * 0.3:
        head += 1
    tail = 1
    raw_bytes = utf8_len(raw)

    def note(h: int, t: int) -> str:
        kept = lines[h - 1][1] + (lines[-1][1] - lines[n - t][0])
        hidden = sum(flags[h : n - t])
        return (
            f"[truncated: showing lines 1-{h:,} and {n - t + 1:,}-{n:,} of {n:,} ({kept:,} of {raw_bytes:,} "
            f"bytes); {n - h - t:,} lines omitted, {hidden:,} of them ERROR or WARN; budget {budget:,} tokens; "
            f"fetch an omitted range with since_line/until_line; full log ref={ref}]"
        )

    def size(h: int, t: int) -> int:
        return lines[h - 1][1] + len(PIECE_SEPARATOR) + (lines[-1][1] - lines[n - t][0]) + 1 + utf8_len(note(h, t))

    while size(head, tail + 1) <= limit:
        tail += 1
    ranges = [(0, lines[head - 1][1]), (lines[n - tail][0], lines[-1][1])]
    out.view, out.retained = cut_view(raw, ranges, note(head, tail)), ranges
    assert estimate_tokens(out.view) <= budget
    return args, out


def tool_fetch_webpage(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    pages = SRE_PAGES if st.service == "sre-agent" else RESEARCH_PAGES
    path = hints.get("path") or rng.choice(pages)
    article = ARTICLES[path]
    host, _, (lo, hi) = SITES[article.site]
    url = f"https://{host}{path}"
    target = int(lo * (hi / lo) ** rng.random())
    raw = page_html(rng, article, target)
    md = article_markdown(article, url)
    note = (
        f"[truncated: main content extracted as markdown, {utf8_len(md):,} of {utf8_len(raw):,} bytes of "
        f"HTML; scripts, styles, navigation and footer removed; full page ref={new_ref(rng)}]"
    )
    out = Outcome(
        raw=raw,
        shape="document",
        view=md + "\n" + note,
        mime="text/plain",
        duration_ms=rng.uniform(250, 1_800) + utf8_len(raw) / 100_000 * 150,
    )
    return {"url": url, "format": "markdown"}, out


SQL_TEMPLATES: dict[str, list[str]] = {
    "support-agent": ["status_summary", "refunds", "carrier_delays"],
    "sre-agent": ["latency", "deployments", "slow_queries"],
    "research-agent": ["tool_usage", "repos"],
}


def _sql_rows(st: CallState, template: str) -> tuple[str, str, list[dict[str, Any]]]:
    rng = st.rng
    store = st.store
    now = st.call_ns
    rows: list[dict[str, Any]]
    if template == "status_summary":
        counts: dict[str, list[float]] = {}
        for r in store.rows:
            c = counts.setdefault(r["status"], [0, 0.0])
            c[0] += 1
            c[1] += r["total"]
        rows = [
            {"status": s, "orders": int(c[0]), "revenue": round(c[1], 2)}
            for s, c in sorted(counts.items(), key=lambda kv: -kv[1][0])
        ]
        return (
            "orders_replica",
            "SELECT status, count(*) AS orders, round(sum(total), 2) AS revenue "
            "FROM orders GROUP BY status ORDER BY orders DESC",
            rows,
        )
    if template == "refund_events":
        oid = store.refund_order_id
        amount = next(r["total"] for r in store.rows if r["order_id"] == oid)
        rows = [
            {
                "event_id": 88_410_217,
                "order_id": oid,
                "event": "refund_requested",
                "amount": amount,
                "actor": "customer",
                "detail": "goods damaged in transit",
                "created_at": "2026-10-21T09:12:44Z",
            },
            {
                "event_id": 88_410_952,
                "order_id": oid,
                "event": "refund_approved",
                "amount": amount,
                "actor": "agent:m.jansen",
                "detail": "photos attached to ticket",
                "created_at": "2026-10-22T14:03:10Z",
            },
            {
                "event_id": 88_412_008,
                "order_id": oid,
                "event": "payout_initiated",
                "amount": amount,
                "actor": "system",
                "detail": "SEPA credit transfer",
                "created_at": "2026-10-23T06:00:02Z",
            },
            {
                "event_id": 88_415_561,
                "order_id": oid,
                "event": "payout_failed",
                "amount": amount,
                "actor": "system",
                "detail": "beneficiary IBAN closed (AC04)",
                "created_at": "2026-10-29T08:41:17Z",
            },
            {
                "event_id": 88_415_562,
                "order_id": oid,
                "event": "status_changed",
                "amount": None,
                "actor": "system",
                "detail": "refund_approved -> refund_pending",
                "created_at": "2026-10-29T08:41:17Z",
            },
        ]
        return (
            "orders_replica",
            "SELECT event_id, order_id, event, amount, actor, detail, created_at "
            f"FROM refund_events WHERE customer_id = '{HEAVY_CUSTOMER_ID}' ORDER BY created_at",
            rows,
        )
    if template == "refunds":
        n = int(20 * (25 ** rng.random()))
        picks = sorted(rng.sample(range(len(store.rows)), n))
        rows = []
        for i in picks:
            r = store.rows[i]
            rows.append(
                {
                    "refund_id": f"RF-{700_000 + i}",
                    "order_id": r["order_id"],
                    "customer_id": r["customer_id"],
                    "amount": round(r["total"] * rng.choice([1, 1, 0.5, 0.25]), 2),
                    "currency": r["currency"],
                    "reason": rng.choice(["damaged", "late_delivery", "wrong_item", "not_as_described", "other"]),
                    "status": rng.choice(["processed", "processed", "processed", "approved", "rejected"]),
                    "requested_at": r["updated_at"],
                }
            )
        return (
            "orders_replica",
            "SELECT refund_id, order_id, customer_id, amount, currency, reason, status, "
            "requested_at FROM refunds WHERE requested_at >= DATE '2026-10-01' ORDER BY requested_at DESC",
            rows,
        )
    if template == "carrier_delays":
        rows = []
        for carrier, _, _ in CARRIERS:
            for country, *_ in COUNTRIES:
                if rng.random() < 0.7:
                    shipments = rng.randint(20, 900)
                    rows.append(
                        {
                            "carrier": carrier,
                            "shipping_country": country,
                            "shipments": shipments,
                            "avg_transit_days": round(rng.uniform(1.2, 6.5), 1),
                            "delayed": int(shipments * rng.uniform(0, 0.2)),
                        }
                    )
        rows.sort(key=lambda r: -int(r["delayed"]))
        return (
            "orders_replica",
            "SELECT carrier, shipping_country, count(*) AS shipments, "
            "round(avg(transit_days), 1) AS avg_transit_days, count(*) FILTER (WHERE delayed) AS delayed "
            "FROM shipments WHERE shipped_at >= DATE '2026-10-15' GROUP BY 1, 2 ORDER BY delayed DESC",
            rows,
        )
    if template == "latency":
        svc = rng.choice(list(LOG_APPS))
        minutes = rng.choice([60, 120, 180, 360, 480])
        start = now - minutes * 60_000_000_000
        base = rng.uniform(40, 180)
        rows = []
        for m in range(minutes):
            spike = 1 + (3.5 if rng.random() < 0.04 else 0)
            p50 = base * rng.uniform(0.9, 1.1)
            rows.append(
                {
                    "bucket": iso_s(start + m * 60_000_000_000 - (start % 60_000_000_000)),
                    "p50_ms": round(p50, 1),
                    "p95_ms": round(p50 * 2.6 * spike, 1),
                    "p99_ms": round(p50 * 4.8 * spike, 1),
                    "error_rate": round(rng.uniform(0, 0.02) * spike, 4),
                    "rps": round(rng.uniform(80, 420), 1),
                }
            )
        return (
            "metrics",
            "SELECT bucket, p50_ms, p95_ms, p99_ms, error_rate, rps FROM request_latency_1m "
            f"WHERE service = '{svc}' AND bucket >= TIMESTAMP '{iso_s(start)}' ORDER BY bucket",
            rows,
        )
    if template == "deployments":
        n = rng.randint(5, 60)
        rows = []
        t = now
        for _ in range(n):
            t -= rng.randint(1_800, 86_400) * 1_000_000_000
            svc = rng.choice(list(LOG_APPS))
            ver = f"{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
            rows.append(
                {
                    "deploy_id": f"dep_{rand_hex(rng, 8)}",
                    "service": svc,
                    "version": ver,
                    "image": f"registry.example.com/acme/{svc}:{ver}",
                    "started_at": iso_s(t),
                    "finished_at": iso_s(t + rng.randint(60, 900) * 1_000_000_000),
                    "status": rng.choice(["succeeded"] * 8 + ["rolled_back", "failed"]),
                    "triggered_by": rng.choice(["ci", "ci", "ci", "priya-ops", "jansen-r"]),
                }
            )
        return (
            "metrics",
            "SELECT deploy_id, service, version, image, started_at, finished_at, status, "
            f"triggered_by FROM deployments ORDER BY started_at DESC LIMIT {n}",
            rows,
        )
    if template == "slow_queries":
        queries = [
            "SELECT * FROM orders WHERE customer_id = $1 ORDER BY created_at DESC",
            "UPDATE inventory SET reserved = reserved + $1 WHERE sku = $2",
            "SELECT o.*, s.* FROM orders o JOIN shipments s ON s.order_id = o.order_id WHERE o.created_at > $1",
            "INSERT INTO order_events (order_id, event, payload) VALUES ($1, $2, $3)",
            "SELECT count(*) FROM refunds WHERE status = $1",
            "DELETE FROM sessions WHERE expires_at < now()",
        ]
        rows = [
            {
                "queryid": -rng.getrandbits(62),
                "calls": rng.randint(100, 2_000_000),
                "mean_ms": round(rng.lognormvariate(2, 1.3), 1),
                "rows": rng.randint(1, 5_000_000),
                "query": rng.choice(queries),
            }
            for _ in range(25)
        ]
        rows.sort(key=lambda r: -float(r["mean_ms"]))
        return (
            "orders_replica",
            "SELECT queryid, calls, round(mean_exec_time::numeric, 1) AS mean_ms, rows, "
            "left(query, 120) AS query FROM pg_stat_statements ORDER BY mean_exec_time DESC LIMIT 25",
            rows,
        )
    if template == "tool_usage":
        days = rng.choice([3, 7, 14, 30])
        tools = ["search_orders", "fetch_pod_logs", "fetch_webpage", "run_sql", "list_github_issues", "get_weather"]
        rows = []
        for d in range(days):
            day = st.day - timedelta(days=days - d)
            for agent in ("support-agent", "sre-agent", "research-agent"):
                for tool in tools:
                    if rng.random() < 0.5:
                        p50 = int(rng.lognormvariate(7, 1))
                        rows.append(
                            {
                                "day": day.isoformat(),
                                "agent": agent,
                                "tool_name": tool,
                                "calls": rng.randint(3, 400),
                                "p50_result_tokens": p50,
                                "p99_result_tokens": int(p50 * rng.uniform(3, 40)),
                                "truncated_share": round(rng.uniform(0, 0.4), 3),
                            }
                        )
        return (
            "analytics",
            "SELECT day, agent, tool_name, calls, p50_result_tokens, p99_result_tokens, "
            f"truncated_share FROM tool_usage_daily WHERE day >= DATE '{(st.day - timedelta(days=days)).isoformat()}' "
            "ORDER BY day, agent, tool_name",
            rows,
        )
    # repos
    n = rng.randint(10, 200)
    stems = ["trace", "agent", "tool", "span", "token", "prompt", "eval", "context", "budget", "otel"]
    ends = ["kit", "lens", "meter", "scope", "hub", "box", "ops", "guard", "flow", "sight"]
    rows = []
    stars = rng.randint(8_000, 30_000)
    for k in range(n):
        stars = int(stars * rng.uniform(0.86, 0.99))
        rows.append(
            {
                "full_name": f"{rng.choice(['oss-lab', 'northwind-labs', 'fieldwork', 'openstack-ai'])}/"
                f"{rng.choice(stems)}{rng.choice(ends)}-{k}",
                "stars": stars,
                "forks": stars // rng.randint(6, 20),
                "open_issues": rng.randint(0, 400),
                "license": rng.choice(["Apache-2.0", "MIT", "MIT", "BSD-3-Clause", None]),
                "primary_language": rng.choice(["Python", "TypeScript", "Go", "Rust"]),
                "pushed_at": iso_s(st.call_ns - rng.randint(1, 200) * 86_400_000_000_000),
            }
        )
    return (
        "analytics",
        "SELECT full_name, stars, forks, open_issues, license, primary_language, pushed_at "
        f"FROM oss_repos WHERE topic = 'agent-observability' ORDER BY stars DESC LIMIT {n}",
        rows,
    )


def tool_run_sql(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    template = hints.get("template") or rng.choice(SQL_TEMPLATES[st.service])
    database, sql, rows = _sql_rows(st, template)
    raw, spans = array_layout([pretty_row(r) for r in rows], pretty=True)
    budget = BUDGETS["run_sql"]
    out = Outcome(raw=raw, shape="list", budget=budget, duration_ms=25 + len(rows) * 1.2 + rng.uniform(0, 300))
    if estimate_tokens(raw) > budget:
        ref = new_ref(rng)
        raw_bytes = utf8_len(raw)

        def note(n: int) -> str:
            return (
                f"[truncated: {n:,} of {len(rows):,} rows shown; the full result is {raw_bytes:,} bytes, "
                f"over this tool's budget of {budget:,} tokens; add a WHERE clause, aggregate, or use "
                f"LIMIT/OFFSET; full result ref={ref}]"
            )

        out.view, out.retained = head_cut(raw, spans, budget, note)
    return {"database": database, "query": sql}, out


def tool_list_github_issues(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    repo = rng.choice(GH_REPOS[st.service])
    want = hints.get("count") or int(
        weighted(rng, [(rng.randint(5, 10), 75), (rng.randint(11, 20), 22), (rng.randint(21, 25), 3)])
    )
    state = rng.choice(["open", "open", "all"])
    top = rng.randint(400, 2_400)
    created = st.call_ns - rng.randint(1, 5) * 86_400_000_000_000
    issues = []
    for k in range(want):
        created -= rng.randint(3_600, 4 * 86_400) * 1_000_000_000
        issues.append(gh_issue(rng, repo, top - k, created))
    raw = json.dumps(issues, indent=2, ensure_ascii=False)
    while len(issues) > 5 and estimate_tokens(raw) > st.room_tokens:
        issues = issues[: max(5, len(issues) * 3 // 4)]
        raw = json.dumps(issues, indent=2, ensure_ascii=False)
    owner, name = repo.split("/")
    args = {
        "owner": owner,
        "repo": name,
        "state": state,
        "sort": "updated",
        "direction": "desc",
        "per_page": len(issues),
        "page": 1,
    }
    return args, Outcome(raw=raw, shape="list", duration_ms=rng.uniform(300, 1_100) + len(issues) * 6)


def tool_kubectl_describe_node(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    node = f"gke-prod-{rng.choice(['general', 'highmem', 'spot'])}-{rand_hex(rng, 8)}-{rand_str(rng, 4, K8S_ALPHABET)}"
    pressure = rng.random() < 0.25
    cpu_req = rng.randint(55, 97)
    mem_req = rng.randint(60, 99)
    raw = "\n".join(
        [
            f"Name:               {node}",
            "Roles:              <none>",
            f"Labels:             cloud.google.com/gke-nodepool={node.split('-')[2]}",
            "                    kubernetes.io/arch=amd64",
            f"                    topology.kubernetes.io/zone=europe-west4-{rng.choice('abc')}",
            f"CreationTimestamp:  {rng.choice(['Mon, 02 Nov 2026 06:14:09', 'Thu, 29 Oct 2026 22:41:37'])} +0000",
            "Taints:             <none>",
            "Unschedulable:      false",
            "Conditions:",
            "  Type             Status  Reason",
            "  ----             ------  ------",
            f"  MemoryPressure   {'True ' if pressure else 'False'}   "
            f"{'KubeletHasInsufficientMemory' if pressure else 'KubeletHasSufficientMemory'}",
            "  DiskPressure     False   KubeletHasNoDiskPressure",
            "  PIDPressure      False   KubeletHasSufficientPID",
            "  Ready            True    KubeletReady",
            "Capacity:           cpu: 8, memory: 32880452Ki, pods: 110",
            "Allocatable:        cpu: 7910m, memory: 29094212Ki, pods: 110",
            f"Non-terminated Pods: {rng.randint(14, 48)} in total",
            "Allocated resources:",
            "  Resource  Requests       Limits",
            f"  cpu       {7910 * cpu_req // 100}m ({cpu_req}%)   {rng.randint(9, 16)} ({rng.randint(110, 200)}%)",
            f"  memory    {29 * mem_req // 100}Gi ({mem_req}%)     {rng.randint(28, 40)}Gi ({rng.randint(96, 140)}%)",
        ]
    )
    return {"node_name": node}, Outcome(raw=raw, shape="record", mime="text/plain", duration_ms=rng.uniform(120, 600))


def tool_get_customer(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    cust = st.store.by_id[hints["customer_id"]] if "customer_id" in hints else rng.choice(st.store.customers)
    heavy = cust.customer_id == HEAVY_CUSTOMER_ID
    record = {
        "customer_id": cust.customer_id,
        "name": cust.name,
        "email": cust.email,
        "tier": cust.tier,
        "country": cust.country,
        "city": cust.city,
        "preferred_currency": cust.currency,
        "customer_since": iso_s(cust.created_ns)[:10],
        "lifetime_orders": HEAVY_ORDER_COUNT if heavy else rng.randint(1, 12),
        "open_tickets": 2 if heavy else rng.randint(0, 2),
        "marketing_opt_in": rng.random() < 0.4,
        "account_manager": "m.jansen" if heavy else None,
    }
    return {"customer_id": cust.customer_id}, Outcome(
        raw=json.dumps(record, indent=2, ensure_ascii=False), shape="record", duration_ms=rng.uniform(30, 160)
    )


def tool_get_shipment_status(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    r = rng.choice([r for r in st.store.rows[:400] if r["tracking_number"]])
    record = {
        "order_id": r["order_id"],
        "carrier": r["carrier"],
        "tracking_number": r["tracking_number"],
        "status": rng.choice(["in_transit", "out_for_delivery", "delivered", "exception"]),
        "last_scan": {
            "at": iso_s(st.call_ns - rng.randint(1, 72) * 3_600_000_000_000),
            "location": f"{r['shipping_city']}, {r['shipping_country']}",
            "event": rng.choice(
                ["Arrived at sorting centre", "Departed facility", "Delivery attempted", "Handed to courier"]
            ),
        },
        "estimated_delivery": (st.day + timedelta(days=rng.randint(0, 4))).isoformat(),
        "delivery_attempts": rng.randint(0, 2),
    }
    return {"order_id": r["order_id"]}, Outcome(
        raw=json.dumps(record, indent=2, ensure_ascii=False), shape="record", duration_ms=rng.uniform(80, 450)
    )


def tool_get_weather(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    city = rng.choice(["Rotterdam, NL", "Hamburg, DE", "Kraków, PL", "Lyon, FR", "Göteborg, SE", "Chicago, US"])
    temp = round(rng.uniform(-4, 14), 1)
    record = {
        "location": city,
        "observed_at": iso_s(st.call_ns - rng.randint(5, 55) * 60_000_000_000),
        "temperature_c": temp,
        "feels_like_c": round(temp - rng.uniform(0, 5), 1),
        "conditions": rng.choice(["clear", "overcast", "light rain", "fog", "snow showers", "windy"]),
        "wind_kph": round(rng.uniform(2, 60), 1),
        "humidity": round(rng.uniform(0.5, 0.98), 2),
        "precip_mm_1h": round(rng.uniform(0, 3), 1) if rng.random() < 0.4 else 0.0,
    }
    return {"location": city, "units": "metric"}, Outcome(
        raw=json.dumps(record, ensure_ascii=False), shape="record", duration_ms=rng.uniform(90, 380)
    )


def tool_get_repo(st: CallState, hints: dict[str, Any]) -> tuple[dict[str, Any], Outcome]:
    rng = st.rng
    repo = rng.choice(GH_REPOS["research-agent"])
    stars = rng.randint(300, 9_000)
    record = {
        "full_name": repo,
        "description": rng.choice(
            [
                "Runtime for tool-calling agents",
                "OpenTelemetry exporter for GenAI spans",
                "Adapters that fit tool results into a token budget",
            ]
        ),
        "default_branch": "main",
        "stargazers_count": stars,
        "forks_count": stars // rng.randint(5, 15),
        "open_issues_count": rng.randint(20, 300),
        "license": "Apache-2.0",
        "language": "Python",
        "latest_release": f"v{rng.randint(0, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        "pushed_at": iso_s(st.call_ns - rng.randint(1, 96) * 3_600_000_000_000),
        "archived": False,
    }
    owner, name = repo.split("/")
    return {"owner": owner, "repo": name}, Outcome(
        raw=json.dumps(record, indent=2, ensure_ascii=False), shape="record", duration_ms=rng.uniform(120, 420)
    )


TOOLS: dict[str, Callable[[CallState, dict[str, Any]], tuple[dict[str, Any], Outcome]]] = {
    "search_orders": tool_search_orders,
    "get_customer_orders": tool_get_customer_orders,
    "fetch_pod_logs": tool_fetch_pod_logs,
    "fetch_webpage": tool_fetch_webpage,
    "run_sql": tool_run_sql,
    "list_github_issues": tool_list_github_issues,
    "kubectl_describe_node": tool_kubectl_describe_node,
    "get_customer": tool_get_customer,
    "get_shipment_status": tool_get_shipment_status,
    "get_weather": tool_get_weather,
    "get_repo": tool_get_repo,
}


def failed(st: CallState, name: str, args: dict[str, Any], shape: str) -> Outcome:
    """A failed call: a timeout (empty result) or the tool's own short error text."""
    rng = st.rng
    budget = BUDGETS.get(name)
    if name in ERRORS and rng.random() < 0.5:
        message, etype, text = ERRORS[name]
        return Outcome(
            raw=text.replace("{pod}", str(args.get("pod_name", ""))),
            shape=shape,
            budget=budget,
            error=message,
            error_type=etype,
            duration_ms=rng.uniform(40, 900),
            mime="text/plain",
        )
    return Outcome(
        raw="",
        shape=shape,
        budget=budget,
        error="timeout after 30s",
        error_type="timeout",
        duration_ms=30_000 + rng.uniform(1, 40),
        mime="text/plain",
    )


# ----------------------------------------------------------------------------------
# Services, dialects and scopes
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Service:
    name: str
    dialect: str  # "genai" or "openinference"; some genai traces switch to "traceloop"
    model: str
    response_model: str
    context_limit: int
    stop_at: int  # stop calling tools once the context holds this many tokens
    system_tokens: int
    pool: tuple[tuple[str, int], ...]
    workflow: str


SERVICES = {
    "support-agent": Service(
        "support-agent",
        "genai",
        "gpt-4o",
        "gpt-4o-2024-08-06",
        128_000,
        90_000,
        2_350,
        (("search_orders", 48), ("get_customer", 18), ("get_shipment_status", 22), ("run_sql", 12)),
        "support_ticket",
    ),
    "sre-agent": Service(
        "sre-agent",
        "genai",
        "gpt-4o",
        "gpt-4o-2024-08-06",
        128_000,
        70_000,
        3_100,
        (
            ("fetch_pod_logs", 10),
            ("kubectl_describe_node", 40),
            ("run_sql", 30),
            ("fetch_webpage", 12),
            ("list_github_issues", 8),
        ),
        "incident_triage",
    ),
    "research-agent": Service(
        "research-agent",
        "openinference",
        "gpt-4.1",
        "gpt-4.1-2025-04-14",
        1_047_576,
        300_000,
        2_700,
        (("fetch_webpage", 13), ("list_github_issues", 10), ("run_sql", 22), ("get_weather", 22), ("get_repo", 33)),
        "research",
    ),
}
SERVICE_ORDER = list(SERVICES)

SCOPES = {
    "agent": {"name": "agent_runtime", "version": "0.9.2"},
    "genai_llm": {"name": "opentelemetry.instrumentation.openai_v2", "version": "2.1b0"},
    "oi_agent": {"name": "openinference.instrumentation.smolagents", "version": "0.1.14"},
    "oi_llm": {"name": "openinference.instrumentation.openai", "version": "0.1.30"},
    "tl_tool": {"name": "traceloop.tracer", "version": "0.47.3"},
    "tl_llm": {"name": "opentelemetry.instrumentation.openai.v1", "version": "0.47.3"},
}
SCOPE_ORDER = list(SCOPES)


def service_version(service: str, day: date) -> str:
    if service == "support-agent":
        return "2.4.0" if day >= ADAPTER_UPGRADE_DAY else "2.3.1"
    return {"sre-agent": "1.8.0", "research-agent": "0.6.2"}[service]


def attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


# ----------------------------------------------------------------------------------
# One trace
# ----------------------------------------------------------------------------------


MIN_TURNS, MAX_TURNS = 4, 14
"""Model calls per trace; every turn but the last asks for one or two tools."""


@dataclass
class Step:
    tool: str
    hints: dict[str, Any] = field(default_factory=dict)


@dataclass
class Stats:
    traces: int = 0
    llm_spans: int = 0
    tool_spans: int = 0
    error_spans: int = 0
    truncated: int = 0
    raw_bytes: int = 0
    view_bytes: int = 0
    by_dialect: dict[str, int] = field(default_factory=dict)
    by_tool: dict[str, list[int]] = field(default_factory=dict)  # tool -> [calls, raw bytes, max raw bytes]


class TraceBuilder:
    def __init__(self, rng: random.Random, service: Service, dialect: str, start_ns: int, stats: Stats) -> None:
        self.rng = rng
        self.service = service
        self.dialect = dialect
        self.stats = stats
        self.trace_id = rand_hex(rng, 32)
        self.root_id = rand_hex(rng, 16)
        self.start_ns = start_ns
        self.clock = start_ns + rng.randint(2, 25) * 1_000_000
        self.spans: list[tuple[str, dict[str, Any]]] = []
        self.context = service.system_tokens + rng.randint(40, 260)

    def _span(
        self,
        scope: str,
        name: str,
        kind: int,
        start: int,
        end: int,
        attrs: list[dict[str, Any]],
        error: str | None = None,
    ) -> None:
        status: dict[str, Any] = {"code": STATUS_OK} if error is None else {"code": STATUS_ERROR, "message": error}
        self.spans.append(
            (
                scope,
                {
                    "traceId": self.trace_id,
                    "spanId": rand_hex(self.rng, 16),
                    "parentSpanId": self.root_id,
                    "name": name,
                    "kind": kind,
                    "startTimeUnixNano": str(start),
                    "endTimeUnixNano": str(end),
                    "attributes": attrs,
                    "status": status,
                },
            )
        )

    def _advance(self, ms: float) -> tuple[int, int]:
        start = self.clock
        end = start + int(ms * 1_000_000)
        self.clock = end + self.rng.randint(1, 15) * 1_000_000
        return start, end

    def llm_call(self, output_tokens: int) -> None:
        rng, svc = self.rng, self.service
        inp = self.context
        start, end = self._advance(260 + inp / 1000 * 7 + output_tokens * 13 + rng.uniform(0, 250))
        if self.dialect == "openinference":
            attrs = [
                attr("openinference.span.kind", "LLM"),
                attr("llm.system", "openai"),
                attr("llm.provider", "openai"),
                attr("llm.model_name", svc.response_model),
                attr("llm.invocation_parameters", '{"temperature": 0.2, "tool_choice": "auto"}'),
                attr("llm.token_count.prompt", inp),
                attr("llm.token_count.completion", output_tokens),
                attr("llm.token_count.total", inp + output_tokens),
            ]
            self._span("oi_llm", "ChatCompletion", KIND_INTERNAL, start, end, attrs)
        elif self.dialect == "traceloop":
            attrs = [
                attr("llm.request.type", "chat"),
                attr("gen_ai.system", "openai"),
                attr("gen_ai.request.model", svc.model),
                attr("gen_ai.response.model", svc.response_model),
                attr("gen_ai.request.temperature", 0.2),
                attr("llm.usage.prompt_tokens", inp),
                attr("llm.usage.completion_tokens", output_tokens),
                attr("llm.usage.total_tokens", inp + output_tokens),
            ]
            self._span("tl_llm", "openai.chat", KIND_CLIENT, start, end, attrs)
        else:
            attrs = [
                attr("gen_ai.operation.name", "chat"),
                attr("gen_ai.system", "openai"),
                attr("gen_ai.request.model", svc.model),
                attr("gen_ai.request.temperature", 0.2),
                attr("gen_ai.response.model", svc.response_model),
                attr("gen_ai.response.id", f"chatcmpl-{rand_str(rng, 29)}"),
                attr("gen_ai.usage.input_tokens", inp),
                attr("gen_ai.usage.output_tokens", output_tokens),
            ]
            self._span("genai_llm", f"chat {svc.model}", KIND_CLIENT, start, end, attrs)
        self.context += output_tokens
        self.stats.llm_spans += 1

    def tool_call(self, name: str, args: dict[str, Any], out: Outcome) -> None:
        rng = self.rng
        start, end = self._advance(out.duration_ms)
        call_id = "call_" + rand_str(rng, 24)
        args_json = json.dumps(args, ensure_ascii=False)
        if self.dialect == "openinference":
            scope, span_name = "oi_agent", name
            attrs = [
                attr("openinference.span.kind", "TOOL"),
                attr("tool.name", name),
                attr("input.value", args_json),
                attr("input.mime_type", "application/json"),
                attr("output.value", out.raw),
                attr("output.mime_type", out.mime),
                attr("toolmeter.tool.call.id", call_id),
            ]
        elif self.dialect == "traceloop":
            scope, span_name = "tl_tool", f"{name}.tool"
            attrs = [
                attr("traceloop.span.kind", "tool"),
                attr("traceloop.entity.name", name),
                attr("traceloop.workflow.name", self.service.workflow),
                attr("traceloop.entity.input", json.dumps({"args": [], "kwargs": args}, ensure_ascii=False)),
                attr("traceloop.entity.output", out.raw),
                attr("toolmeter.tool.call.id", call_id),
            ]
        else:
            scope, span_name = "agent", f"execute_tool {name}"
            attrs = [
                attr("gen_ai.operation.name", "execute_tool"),
                attr("gen_ai.tool.name", name),
                attr("gen_ai.tool.type", "function"),
                attr("gen_ai.tool.call.id", call_id),
                attr("gen_ai.tool.call.arguments", args_json),
                attr("gen_ai.tool.call.result", out.raw),
            ]
        attrs.append(attr("toolmeter.shape", out.shape))
        if out.budget is not None:
            attrs.append(attr("toolmeter.budget.tokens", out.budget))
        attrs.append(attr("toolmeter.truncated", out.view is not None))
        if out.view is not None:
            attrs.append(attr("toolmeter.view", out.view))
            if out.retained is not None:
                attrs.append(attr("toolmeter.retained", format_ranges(out.retained)))
        if out.error_type:
            attrs.append(attr("error.type", out.error_type))
        self._span(scope, span_name, KIND_INTERNAL, start, end, attrs, out.error)
        self.context += estimate_tokens(out.shown) + 6
        st = self.stats
        st.tool_spans += 1
        st.error_spans += out.error is not None
        st.truncated += out.view is not None
        st.raw_bytes += utf8_len(out.raw)
        st.view_bytes += utf8_len(out.view) if out.view is not None else 0
        st.by_dialect[self.dialect] = st.by_dialect.get(self.dialect, 0) + 1
        row = st.by_tool.setdefault(name, [0, 0, 0])
        row[0] += 1
        row[1] += utf8_len(out.raw)
        row[2] = max(row[2], utf8_len(out.raw))

    def finish(self) -> list[tuple[str, dict[str, Any]]]:
        end = self.clock + self.rng.randint(1, 6) * 1_000_000
        attrs = [
            attr("gen_ai.operation.name", "invoke_agent"),
            attr("gen_ai.agent.name", self.service.name),
            attr("gen_ai.conversation.id", f"conv_{rand_hex(self.rng, 16)}"),
        ]
        scope = "agent"
        if self.dialect == "openinference":
            attrs.append(attr("openinference.span.kind", "AGENT"))
            scope = "oi_agent"
        root = {
            "traceId": self.trace_id,
            "spanId": self.root_id,
            "name": f"invoke_agent {self.service.name}",
            "kind": KIND_INTERNAL,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(end),
            "attributes": attrs,
            "status": {"code": STATUS_OK},
        }
        self.stats.traces += 1
        return [(scope, root), *self.spans]


def plan_trace(
    rng: random.Random, service: Service, special: dict[str, Any] | None, keeps_matches: bool
) -> list[list[Step]]:
    """The tool calls of one trace, grouped by the model turn that asked for them."""
    story: list[list[Step]] = []
    special = special or {}
    kind = special.get("kind")
    if kind == "refund":
        story.append([Step("get_customer", {"customer_id": HEAVY_CUSTOMER_ID, "story": True})])
        story.append([Step("get_customer_orders", {"story": True})])
        if not keeps_matches:  # the head-only view hides the refund: the agent pages on to find it
            story.append([Step("get_customer_orders", {"page": 2, "story": True})])
            story.append([Step("get_customer_orders", {"page": 3, "story": True})])
        story.append([Step("run_sql", {"template": "refund_events", "story": True})])
        return story
    if kind == "big_search":
        story.append([Step("search_orders", {"args": special["args"], "story": True})])
        story.append([Step("search_orders")])
        story.append([Step("run_sql", {"template": "status_summary"})])
    elif kind == "giant_log":
        story.append([Step("kubectl_describe_node")])
        story.append([Step("fetch_pod_logs", {"app": "checkout-api", "bytes": special["bytes"], "story": True})])
    elif service.name == "support-agent":
        story.append([Step(weighted(rng, [("search_orders", 3), ("get_customer", 1)]))])
    elif service.name == "sre-agent":
        story.append([Step(rng.choice(["fetch_pod_logs", "kubectl_describe_node"]))])
    else:
        story.append([Step(rng.choice(["fetch_webpage", "fetch_webpage", "get_repo"]))])
    turns = rng.choices(range(MIN_TURNS, MAX_TURNS + 1), weights=[10, 12, 12, 11, 10, 8, 7, 6, 5, 4, 3])[0]
    tools = [t for t, _ in service.pool]
    weights = [w for _, w in service.pool]
    while len(story) < turns - 1:
        group = [Step(t) for t in rng.choices(tools, weights=weights, k=1 if rng.random() < 0.72 else 2)]
        story.append(group)
    return story


def build_trace(
    rng: random.Random,
    store: OrderStore,
    day: date,
    service: Service,
    dialect: str,
    start_ns: int,
    special: dict[str, Any] | None,
    stats: Stats,
) -> list[tuple[str, dict[str, Any]]]:
    keeps_matches = service.name == "support-agent" and day >= ADAPTER_UPGRADE_DAY
    plan = plan_trace(rng, service, special, keeps_matches)
    tb = TraceBuilder(rng, service, dialect, start_ns, stats)
    gi = 0
    while gi < len(plan):
        if gi >= 3 and tb.context > service.stop_at:
            break  # the window is filling up: the agent answers with what it has
        group = plan[gi]
        done: list[tuple[str, dict[str, Any], Outcome]] = []
        for step in group:
            # Room left in the window, counting the results of the calls already made this turn.
            room = service.context_limit * 9 // 10 - tb.context - sum(estimate_tokens(o.shown) + 6 for *_, o in done)
            st = CallState(rng, day, store, service.name, tb.clock, room, keeps_matches)
            args, out = TOOLS[step.tool](st, step.hints)
            if not step.hints.get("story") and not step.hints.get("retry") and rng.random() < 0.025:
                out = failed(st, step.tool, args, out.shape)
                if rng.random() < 0.6:  # the model retries the failed call on its next turn
                    retry = [Step(step.tool, {**step.hints, "args": args, "retry": True})]
                    if len(plan) >= MAX_TURNS - 1 and len(plan) > gi + 1:
                        plan.pop()  # the retry takes the place of the last planned turn
                    if len(plan) < MAX_TURNS - 1:
                        plan.insert(gi + 1, retry)
            done.append((step.tool, args, out))
        args_tokens = sum(estimate_tokens(json.dumps(a, ensure_ascii=False)) + 12 for _, a, _ in done)
        tb.llm_call(args_tokens + rng.randint(10, 90))
        for name, args, out in done:
            tb.tool_call(name, args, out)
        gi += 1
    tb.llm_call(rng.randint(140, 720))
    return tb.finish()


# ----------------------------------------------------------------------------------
# Days, files and the read-back check
# ----------------------------------------------------------------------------------

SPECIALS: dict[date, list[dict[str, Any]]] = {
    date(2026, 11, 9): [{"service": "support-agent", "kind": "refund"}],
    date(2026, 11, 10): [{"service": "support-agent", "kind": "big_search", "args": {"limit": 2_000}}],
    date(2026, 11, 11): [
        {"service": "support-agent", "kind": "refund"},
        {"service": "sre-agent", "kind": "giant_log", "bytes": 1_195_000},
    ],
    date(2026, 11, 12): [{"service": "support-agent", "kind": "big_search", "args": {}}],
    date(2026, 11, 13): [{"service": "support-agent", "kind": "refund"}],
    date(2026, 11, 14): [{"service": "support-agent", "kind": "refund"}],
    date(2026, 11, 16): [{"service": "support-agent", "kind": "refund"}],
    date(2026, 11, 17): [{"service": "support-agent", "kind": "big_search", "args": {"limit": 1_500}}],
    date(2026, 11, 18): [{"service": "support-agent", "kind": "refund"}],
    date(2026, 11, 19): [{"service": "sre-agent", "kind": "giant_log", "bytes": 700_000}],
    date(2026, 11, 20): [{"service": "support-agent", "kind": "refund"}],
    date(2026, 11, 21): [{"service": "support-agent", "kind": "big_search", "args": {"limit": 2_500}}],
    date(2026, 11, 22): [{"service": "support-agent", "kind": "refund"}],
}


def build_day(day: date, store: OrderStore, stats: Stats) -> dict[str, Any]:
    rng = random.Random(f"{SEED}:{day.isoformat()}")
    count = rng.randint(8, 12)
    services = list(SERVICE_ORDER)
    while len(services) < count:
        services.append(weighted(rng, [("support-agent", 48), ("sre-agent", 32), ("research-agent", 20)]))
    rng.shuffle(services)
    specials: list[dict[str, Any] | None] = [None] * count
    for sp in SPECIALS.get(day, []):
        slot = next(i for i, s in enumerate(services) if s == sp["service"] and specials[i] is None)
        specials[slot] = sp
    base = day_start_ns(day)
    starts = sorted(
        base + rng.randint(6 * 3600, 21 * 3600) * 1_000_000_000 + rng.randint(0, 999) * 1_000_000 for _ in range(count)
    )
    by_service: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name, special, start in zip(services, specials, starts, strict=False):
        service = SERVICES[name]
        dialect = service.dialect
        if dialect == "genai" and special is None and rng.random() < 0.12:
            dialect = "traceloop"
        for scope, span in build_trace(rng, store, day, service, dialect, start, special, stats):
            by_service.setdefault(name, {}).setdefault(scope, []).append(span)
    resource_spans = []
    for name in SERVICE_ORDER:
        if name not in by_service:
            continue
        resource = [
            attr("service.name", name),
            attr("service.namespace", "toolmeter-demo"),
            attr("service.version", service_version(name, day)),
            attr("deployment.environment.name", "production"),
            attr("telemetry.sdk.name", "opentelemetry"),
            attr("telemetry.sdk.language", "python"),
            attr("telemetry.sdk.version", "1.38.0"),
        ]
        scope_spans = [{"scope": SCOPES[s], "spans": by_service[name][s]} for s in SCOPE_ORDER if s in by_service[name]]
        resource_spans.append({"resource": {"attributes": resource}, "scopeSpans": scope_spans})
    return {"resourceSpans": resource_spans}


def write_gz(path: Path, payload: bytes) -> None:
    with (
        path.open("wb") as fh,
        gzip.GzipFile(filename=path.name[:-3], mode="wb", fileobj=fh, compresslevel=9, mtime=0) as gz,
    ):
        gz.write(payload)


TOOL_RESULT_KEYS = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")


def iter_tool_spans(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                attrs = {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}
                if any(k in attrs for k in TOOL_RESULT_KEYS):
                    yield attrs


def check_file(path: Path) -> int:
    """Read a file back the way a loader would and verify every view against its raw result."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        request = json.load(fh)
    checked = 0
    for attrs in iter_tool_spans(request):
        raw = next(attrs[k] for k in TOOL_RESULT_KEYS if k in attrs)
        view = attrs.get("toolmeter.view")
        assert attrs["toolmeter.shape"] in ("list", "record", "document", "diagnostic")
        assert attrs["toolmeter.truncated"] is (view is not None)
        if view is None:
            assert "toolmeter.retained" not in attrs
            continue
        cut = view.rfind(NOTE_MARKER)
        assert cut > 0 and view.endswith("]"), "a view must end with its truncation note"
        name = next(attrs[k] for k in TOOL_NAME_KEYS if k in attrs)
        if name in ROW_CAPS:
            assert len(json.loads(view[:cut] + "]")) == ROW_CAPS[name], "a row cap keeps whole rows"
        elif "toolmeter.budget.tokens" in attrs:
            assert estimate_tokens(view) <= int(attrs["toolmeter.budget.tokens"])
        if "toolmeter.retained" not in attrs:
            assert attrs["toolmeter.shape"] == "document"
            continue
        data = raw.encode("utf-8")
        ranges = [tuple(int(x) for x in part.split("-")) for part in attrs["toolmeter.retained"].split(",")]
        prev = 0
        for start, end in ranges:
            assert prev <= start < end <= len(data), (path, ranges)
            prev = end
        expected = PIECE_SEPARATOR.join(data[s:e].decode("utf-8") for s, e in ranges)
        assert view[:cut] == expected, f"{path.name}: view does not match its retained ranges"
        checked += 1
    return checked


def main() -> int:
    store = OrderStore(random.Random(SEED))
    assert store.text_v1[0] == json.dumps(store.rows[0], ensure_ascii=False)
    stats = Stats()
    files: list[tuple[Path, int, int, int]] = []
    for offset in range(DAY_COUNT):
        day = FIRST_DAY + timedelta(days=offset)
        before = stats.traces
        request = build_day(day, store, stats)
        payload = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        path = OUT_DIR / f"traces-{day.isoformat()}.json.gz"
        write_gz(path, payload)
        files.append((path, stats.traces - before, len(payload), path.stat().st_size))

    checked = sum(check_file(path) for path, *_ in files)
    compressed = sum(f[3] for f in files)
    uncompressed = sum(f[2] for f in files)

    print(f"{'file':<30} {'traces':>6} {'json bytes':>12} {'gz bytes':>10}")
    for path, traces, size, gz in files:
        print(f"{path.name:<30} {traces:>6} {size:>12,} {gz:>10,}")
    print()
    print(f"files:                      {len(files)}")
    print(f"traces:                     {stats.traces}")
    print(f"LLM spans:                  {stats.llm_spans}")
    dialects = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_dialect.items()))
    print(f"tool spans:                 {stats.tool_spans} ({dialects})")
    print(f"  failed (status ERROR):    {stats.error_spans}")
    print(f"  with a view (truncated):  {stats.truncated} ({checked} with retained ranges, all verified)")
    print(f"compressed bytes (.gz):     {compressed:,}")
    print(f"uncompressed JSON bytes:    {uncompressed:,}")
    print(f"raw tool result bytes:      {stats.raw_bytes:,}")
    print(f"view bytes:                 {stats.view_bytes:,}")
    print()
    print(f"{'tool':<24} {'calls':>6} {'raw bytes':>12} {'largest':>11}")
    for name in TOOLS:
        calls, total, largest = stats.by_tool.get(name, [0, 0, 0])
        print(f"{name:<24} {calls:>6} {total:>12,} {largest:>11,}")
    problems = []
    if compressed >= MAX_COMPRESSED_BYTES:
        problems.append(f"compressed total {compressed:,} bytes is over the {MAX_COMPRESSED_BYTES:,} limit")
    if stats.raw_bytes >= MAX_RAW_BYTES:
        problems.append(f"raw result total {stats.raw_bytes:,} bytes is over the {MAX_RAW_BYTES:,} limit")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

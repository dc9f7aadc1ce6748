// A Vercel AI SDK 7 agent traced by @ai-sdk/otel, exporting OTLP/HTTP protobuf to toolmeter.
//
// Run by tests/frameworks/test_ai_sdk.py:  node agent.mjs otel|legacy
//   otel:   registerTelemetry(new OpenTelemetry())        -> GenAI-convention spans (gen_ai.*)
//   legacy: registerTelemetry(new LegacyOpenTelemetry())  -> the AI SDK's own ai.* spans (the
//           pre-v7 `experimental_telemetry` format, now an integration in @ai-sdk/otel)
//   node agent.mjs payloads   prints the three tools' payloads as JSON (the test compares them,
//           byte for byte, with tests/frameworks/drivers/agentkit.py).
//
// Environment (set by the test): OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OPENAI_BASE_URL
// (FakeOpenAI, ends in /v1), OPENAI_API_KEY, TOOLMETER_FW_RESULTS (where to write what each tool
// returned). The model is @ai-sdk/openai's chat-completions model, never the Responses API.

import { writeFileSync } from 'node:fs';

// --- the three tools' payloads: a byte-identical port of agentkit.orders/logs/status -----------

const REGIONS = ['eu-west', 'us-east', 'ap-south'];

class PyFloat {
  constructor(value) {
    this.value = value;
  }
}

/** Python's round(x, 2) for x >= 0: correctly rounded from the exact binary value, exact ties to even. */
function pyRound2(x) {
  const [ip, fp] = x.toFixed(60).split('.'); // a double's exact decimal expansion fits in 60 places here
  if (/^50*$/.test(fp.slice(2)) && Number(fp[1]) % 2 === 0) return Number(`${ip}.${fp.slice(0, 2)}`); // tie, even: down
  return Number(x.toFixed(2)); // toFixed: nearest, exact ties up
}

/** Python's repr of a float (shortest round-trip; integral values keep ".0"). */
function pyFloatRepr(v) {
  const s = String(v);
  return Number.isInteger(v) && !s.includes('e') ? `${s}.0` : s;
}

/** json.dumps with Python's default separators (", ", ": ") and ensure_ascii. */
function pyDumps(v) {
  if (v instanceof PyFloat) return pyFloatRepr(v.value);
  if (typeof v === 'string') return JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  if (typeof v === 'number') return String(v);
  if (v === null) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (Array.isArray(v)) return `[${v.map(pyDumps).join(', ')}]`;
  return `{${Object.entries(v).map(([k, x]) => `${pyDumps(k)}: ${pyDumps(x)}`).join(', ')}}`;
}

const pad = (n, w) => String(n).padStart(w, '0');

export function orders(status = 'refunded') {
  const rows = [];
  for (let i = 0; i < 300; i++) {
    rows.push({
      order_id: `A-${10001 + i}`,
      status,
      customer: { name: `Customer ${pad(i, 3)}`, email: `customer${pad(i, 3)}@example.com` },
      region: REGIONS[i % 3],
      total: new PyFloat(pyRound2(19.99 + ((i * 7.31) % 480))),
      currency: 'EUR',
      items: [{ sku: `SKU-${pad((i * 13) % 997, 4)}`, qty: 1 + (i % 3), title: 'Trail running shoe, waterproof' }],
      created_at: `2026-11-${pad(1 + (i % 28), 2)}T${pad(i % 24, 2)}:${pad(i % 60, 2)}:00Z`,
      refund_reason: i % 2 ? 'arrived damaged' : 'wrong size',
    });
  }
  return pyDumps(rows);
}

export function logs(pod = 'checkout-7d9f') {
  const lines = [];
  for (let i = 0; i < 2000; i++) {
    const level = i % 97 === 0 ? 'ERROR' : i % 31 === 0 ? 'WARN' : 'INFO';
    lines.push(
      `2026-11-20T10:${pad(Math.floor(i / 60) % 60, 2)}:${pad(i % 60, 2)}.${pad(i % 1000, 3)}Z ${level} ${pod} ` +
        `request_id=r${pad(i, 5)} path=/api/checkout status=${level === 'ERROR' ? 500 : 200} latency_ms=${(i * 37) % 900}`,
    );
  }
  return lines.join('\n');
}

export function status(orderId = 'A-10001') {
  return `Order ${orderId}: shipped on 2026-11-19 via DHL, tracking 00340434161234567890.`;
}

const DESCRIPTIONS = {
  search_orders: 'Search orders by status; returns the matching orders as JSON.',
  fetch_logs: 'Fetch the recent log lines of a Kubernetes pod.',
  get_status: 'Get the shipping status of one order.',
};
const PROMPT = 'Why are refunds up? Search refunded orders, fetch the checkout-7d9f logs and check order A-10001.';

const mode = process.argv[2] || 'otel';

if (mode === 'payloads') {
  writeFileSync(1, JSON.stringify({ search_orders: orders(), fetch_logs: logs(), get_status: status() })); // sync: a pipe write could be cut by exit
  process.exit(0);
}
if (mode !== 'otel' && mode !== 'legacy') {
  console.error(`usage: node agent.mjs otel|legacy|payloads (got ${mode})`);
  process.exit(2);
}

// --- OpenTelemetry: a Node tracer provider exporting OTLP/HTTP protobuf -----------------------

const { NodeTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-node');
const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
const { resourceFromAttributes } = await import('@opentelemetry/resources');
const { generateText, tool, stepCountIs, registerTelemetry } = await import('ai');
const { createOpenAI } = await import('@ai-sdk/openai');
const { OpenTelemetry, LegacyOpenTelemetry } = await import('@ai-sdk/otel');
const { z } = await import('zod');

const endpoint = process.env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, '');
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME || `ai-sdk-${mode}` }),
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint}/v1/traces` }), { scheduledDelayMillis: 100 })],
});
provider.register(); // global tracer provider + AsyncLocalStorage context manager

// The docs' set-up: one integration registered globally, using the global tracer provider (its
// tracer's scope is 'gen_ai' for OpenTelemetry, 'ai' for LegacyOpenTelemetry). Telemetry is on by
// default in v7 and records inputs and outputs unless telemetry.recordInputs/recordOutputs are false.
registerTelemetry(mode === 'otel' ? new OpenTelemetry() : new LegacyOpenTelemetry());

// --- the agent ---------------------------------------------------------------------------------

const returned = {};
const note = (name, value) => {
  (returned[name] ??= []).push(value);
  return value;
};

const tools = {
  search_orders: tool({
    description: DESCRIPTIONS.search_orders,
    inputSchema: z.object({ status: z.string() }),
    execute: async ({ status: s }) => note('search_orders', orders(s)),
  }),
  fetch_logs: tool({
    description: DESCRIPTIONS.fetch_logs,
    inputSchema: z.object({ pod: z.string() }),
    execute: async ({ pod }) => note('fetch_logs', logs(pod)),
  }),
  get_status: tool({
    description: DESCRIPTIONS.get_status,
    inputSchema: z.object({ order_id: z.string() }),
    execute: async ({ order_id }) => note('get_status', status(order_id)),
  }),
};

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });

let result;
try {
  result = await generateText({
    model: openai.chat('gpt-4o-mini'),
    tools,
    prompt: PROMPT,
    stopWhen: stepCountIs(5),
    telemetry: { functionId: 'toolmeter-ai-sdk-agent', recordInputs: true, recordOutputs: true },
  });
} finally {
  await provider.forceFlush();
  await provider.shutdown();
}

writeFileSync(
  process.env.TOOLMETER_FW_RESULTS,
  JSON.stringify({
    returned,
    mode,
    steps: result.steps.length,
    text: result.text,
    tool_call_ids: result.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.toolCallId])),
  }),
);
console.log(`ai-sdk ${mode}: ${result.steps.length} steps; ${result.text}`);

// A small agent traced with the OpenTelemetry JavaScript SDK. It exports its spans over
// OTLP/HTTP to the URL given, as JSON or protobuf:  node agent.js URL json|proto [TOKEN]
// and prints the tool results it produced (JSON), so the test can check what was stored.
const { BasicTracerProvider, SimpleSpanProcessor } = require("@opentelemetry/sdk-trace-base");
const { resourceFromAttributes } = require("@opentelemetry/resources");
const { context, trace } = require("@opentelemetry/api");

const [url, mode, token] = process.argv.slice(2);
const Exporter = mode === "proto"
  ? require("@opentelemetry/exporter-trace-otlp-proto").OTLPTraceExporter
  : require("@opentelemetry/exporter-trace-otlp-http").OTLPTraceExporter;
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const exporter = new Exporter({ url: `${url}/v1/traces`, headers });
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ "service.name": `js-agent-${mode}` }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const tracer = provider.getTracer("js-agent");

const results = [];
const root = tracer.startSpan("invoke_agent js", { attributes: { "gen_ai.operation.name": "invoke_agent" } });
const ctx = trace.setSpan(context.active(), root);
let t = Date.now();
for (let i = 0; i < 3; i++) {
  const chat = tracer.startSpan("chat gpt-4o", { startTime: t, attributes: { "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 1000 * (i + 1) } }, ctx);
  chat.end(t + 5);
  t += 10;
  const rows = Array.from({ length: 40 * (i + 1) }, (_, k) => ({ id: k, city: "Kraków", note: "ünïcödé ✓" }));
  const result = JSON.stringify(rows);
  results.push(result);
  const tool = tracer.startSpan("execute_tool lookup_rows", { startTime: t, attributes: {
    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_rows",
    "gen_ai.tool.call.id": `call_${i}`, "gen_ai.tool.call.result": result } }, ctx);
  tool.end(t + 5);
  t += 10;
}
const last = tracer.startSpan("chat gpt-4o", { startTime: t, attributes: { "gen_ai.operation.name": "chat" } }, ctx);
last.end(t + 5);
root.end(t + 10);

provider.forceFlush()
  .then(() => provider.shutdown())
  .then(() => { process.stdout.write(JSON.stringify(results)); })
  .catch((err) => { console.error(err); process.exit(1); });

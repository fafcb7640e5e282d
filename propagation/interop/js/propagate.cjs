#!/usr/bin/env node
// propagate.cjs: a foreign W3C hop for sessionwire's interoperability tests.
//
// It runs the OpenTelemetry JavaScript SDK's own propagators
// (W3CBaggagePropagator and W3CTraceContextPropagator from @opentelemetry/core,
// driven through @opentelemetry/api's propagation API), so the Go tests can
// check what a real, independently written W3C implementation does with a
// session: whether each member survives, and with which value.
//
// Input is one JSON object on stdin; output is one JSON object on stdout.
//
//   {"mode": "hop", "headers": {"baggage": "k=v" | ["k=v", "k2=v2"], "traceparent": "00-…"}}
//     extracts the headers into a context, then injects that context into a
//     fresh carrier: what a JavaScript service forwarding the request sends on.
//
//   {"mode": "build", "entries": {"session.chat_id": "42", "session.thread_id": "\u0000"},
//    "traceparent": "00-…"}
//     builds the baggage in JavaScript (propagation.createBaggage) and injects
//     it; the traceparent, if given, is extracted first so the trace goes on.
//
// Both answer {"headers": {…injected…}, "entries": {key: decoded value, …}},
// where entries is the baggage the JavaScript side held before injecting.
//
// For a person trying it by hand, argv works too:
//   node propagate.cjs hop 'session.chat_id=42,k=' [traceparent]
'use strict';

const {
  ROOT_CONTEXT,
  defaultTextMapGetter,
  defaultTextMapSetter,
  propagation,
} = require('@opentelemetry/api');
const {
  CompositePropagator,
  W3CBaggagePropagator,
  W3CTraceContextPropagator,
} = require('@opentelemetry/core');

propagation.setGlobalPropagator(
  new CompositePropagator({
    propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()],
  }),
);

// Header names are case-insensitive on the wire; the JavaScript getter looks
// them up in lower case, as Node's http module stores them.
function lowerKeys(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers || {})) {
    out[k.toLowerCase()] = v;
  }
  return out;
}

function entriesOf(ctx) {
  const bag = propagation.getBaggage(ctx);
  const out = {};
  if (bag) {
    for (const [k, e] of bag.getAllEntries()) {
      out[k] = e.value;
    }
  }
  return out;
}

function injectFrom(ctx) {
  const carrier = {};
  propagation.inject(ctx, carrier, defaultTextMapSetter);
  return { headers: carrier, entries: entriesOf(ctx) };
}

function hop(req) {
  const carrier = lowerKeys(req.headers);
  // The context is passed explicitly: with no context manager registered (a
  // script needs none), context.with would not make ctx the active one.
  const ctx = propagation.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
  return injectFrom(ctx);
}

function build(req) {
  let ctx = ROOT_CONTEXT;
  if (req.traceparent) {
    ctx = propagation.extract(ctx, { traceparent: req.traceparent }, defaultTextMapGetter);
  }
  const entries = {};
  for (const [k, v] of Object.entries(req.entries || {})) {
    if (typeof v !== 'string') {
      throw new Error(`entry ${JSON.stringify(k)}: value must be a string, got ${typeof v}`);
    }
    entries[k] = { value: v };
  }
  ctx = propagation.setBaggage(ctx, propagation.createBaggage(entries));
  return injectFrom(ctx);
}

function run(req) {
  switch (req.mode) {
    case 'hop':
      return hop(req);
    case 'build':
      return build(req);
    default:
      throw new Error(`unknown mode ${JSON.stringify(req.mode)}: want "hop" or "build"`);
  }
}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on('data', (c) => chunks.push(c));
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    process.stdin.on('error', reject);
  });
}

async function main() {
  const args = process.argv.slice(2);
  let req;
  if (args.length > 0) {
    if (args[0] !== 'hop' || args.length < 2 || args.length > 3) {
      throw new Error('usage: propagate.cjs hop BAGGAGE [TRACEPARENT]  (or a JSON request on stdin)');
    }
    req = { mode: 'hop', headers: { baggage: args[1] } };
    if (args[2]) req.headers.traceparent = args[2];
  } else {
    const text = await readStdin();
    try {
      req = JSON.parse(text);
    } catch (err) {
      throw new Error(`read request from stdin: ${err.message}`);
    }
  }
  process.stdout.write(JSON.stringify(run(req)) + '\n');
}

main().catch((err) => {
  process.stderr.write(`propagate.cjs: ${err.message}\n`);
  process.exit(1);
});

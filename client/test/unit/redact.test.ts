import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import { NotificationType, Trace, TraceFormat, createMessageConnection } from "vscode-jsonrpc/node";
import { SET_API_KEY_NOTIFICATION } from "../../src/core/protocol";
import { REDACTED, Redactor } from "../../src/core/redact";

const KEY = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";

describe("Redactor", () => {
  it("removes a remembered key wherever it appears", () => {
    const r = new Redactor();
    r.add("my-custom-proxy-key-42");
    assert.equal(r.redact("env key=my-custom-proxy-key-42 end"), `env key=${REDACTED} end`);
  });

  it("removes keys it was never told about, by shape", () => {
    const r = new Redactor();
    assert.ok(!r.redact(`{"apiKey": "whatever-value"}`).includes("whatever-value"));
    assert.ok(!r.redact(`ANTHROPIC_API_KEY=abc123456789 python -m stitch_lsp`).includes("abc123456789"));
    assert.ok(!r.redact(`"ANTHROPIC_API_KEY": "zzz-999-yyy"`).includes("zzz-999-yyy"));
    assert.ok(!r.redact(`auth failed for ${KEY}`).includes(KEY));
    assert.equal(r.redact("no secrets here: apiKey is a word"), "no secrets here: apiKey is a word");
  });

  it("ignores strings too short to be keys (so it never blanks out ordinary words)", () => {
    const r = new Redactor();
    r.add("abc");
    r.add(undefined);
    assert.equal(r.redact("abc def"), "abc def");
  });

  it("keeps stitch/setApiKey's key out of a verbose LSP trace", async () => {
    const toServer = new PassThrough();
    const toClient = new PassThrough();
    const client = createMessageConnection(toClient, toServer);
    const server = createMessageConnection(toServer, toClient);
    const lines: string[] = [];
    const redactor = new Redactor();
    redactor.add(KEY);
    // What vscode-languageclient does with each trace entry: write it to the trace channel, here through the Redactor.
    await client.trace(Trace.Verbose, { log: (message: unknown, data?: string) => lines.push(redactor.redact(data ? `${message}\n${data}` : String(message))) }, {
      sendNotification: false,
      traceFormat: TraceFormat.Text,
    });
    const received = new Promise<{ apiKey: string }>((resolve) =>
      server.onNotification(new NotificationType<{ apiKey: string }>(SET_API_KEY_NOTIFICATION), resolve),
    );
    client.listen();
    server.listen();
    await client.sendNotification(new NotificationType<{ apiKey: string }>(SET_API_KEY_NOTIFICATION), { apiKey: KEY });
    assert.equal((await received).apiKey, KEY, "the server still gets the key");
    const text = lines.join("\n");
    assert.match(text, /stitch\/setApiKey/, "the notification is traced");
    assert.match(text, /"apiKey"/, "with its parameters (verbose)");
    assert.ok(!text.includes(KEY), text);
    assert.ok(!text.includes("AbCdEfGh"), "no fragment of the key either");
    client.dispose();
    server.dispose();
  });
});

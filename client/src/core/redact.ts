/**
 * Keeps the Anthropic API key out of every channel the client writes: the
 * output channel (server stderr, client log) and the trace channel (which, at
 * `verbose`, prints each message's parameters, `stitch/setApiKey` included).
 */

export const REDACTED = "<redacted>";

// Shapes a key takes in a message or a log line even when its value is not known here.
const PATTERNS: [RegExp, string][] = [
  [/("(?:apiKey|api_key|ANTHROPIC_API_KEY)"\s*:\s*)"(?:[^"\\]|\\.)*"/g, `$1"${REDACTED}"`],
  [/(ANTHROPIC_API_KEY\s*[=:]\s*)[^\s"',}]+/g, `$1${REDACTED}`],
  [/\bsk-ant-[A-Za-z0-9_-]{8,}/g, REDACTED],
];

export class Redactor {
  private secrets = new Set<string>();

  /** Remember a secret value; every later `redact` removes it. Short strings are not secrets worth masking. */
  add(secret: string | undefined): void {
    if (secret !== undefined && secret.length >= 8) {
      this.secrets.add(secret);
      // The JSON-escaped form appears in traces when the key has characters JSON escapes.
      this.secrets.add(JSON.stringify(secret).slice(1, -1));
    }
  }

  redact(text: string): string {
    let result = text;
    for (const secret of this.secrets) {
      result = result.split(secret).join(REDACTED);
    }
    for (const [pattern, replacement] of PATTERNS) {
      result = result.replace(pattern, replacement);
    }
    return result;
  }
}

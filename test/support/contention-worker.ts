// One OS process of the contention test: N concurrent callers hammer one Redis bucket until the
// deadline, then print what they saw as one JSON line. Times are epoch ms with µs precision,
// comparable across processes on one machine.
import { Redis as IORedis } from 'ioredis';
import { createLimiter } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis.js';

const [url, policyJson, callersArg, startAtArg, durationArg, key] = process.argv.slice(2);
const policy = JSON.parse(policyJson!);
const callers = Number(callersArg);
const startAt = Number(startAtArg);
const durationMs = Number(durationArg);
const now = () => performance.timeOrigin + performance.now();

const client = new IORedis(url!);
const limiter = createLimiter({ store: redisStore({ client }), policies: { c: policy }, timeoutMs: 5000 });
await client.ping();
while (now() < startAt) await new Promise((r) => setTimeout(r, Math.max(0, Math.min(5, startAt - now()))));
const deadline = startAt + durationMs;

let admitted = 0;
let decisions = 0;
let errors = 0;
let firstStart = Infinity;
let firstEnd = Infinity;
let lastStart = 0;
let lastEnd = 0;
async function caller() {
  while (now() < deadline) {
    const s = now();
    const d = await limiter.take('c', key!);
    const e = now();
    firstStart = Math.min(firstStart, s);
    firstEnd = Math.min(firstEnd, e);
    lastStart = Math.max(lastStart, s);
    lastEnd = Math.max(lastEnd, e);
    decisions++;
    if (d.reason) errors++;
    else if (d.allowed) admitted++;
  }
}
await Promise.all(Array.from({ length: callers }, caller));
process.stdout.write(`${JSON.stringify({ admitted, decisions, errors, firstStart, firstEnd, lastStart, lastEnd })}\n`);
client.disconnect();

// Child process for the Lambda bundle test: imports the built bundle (as the Lambda runtime would) and
// invokes its handler once per fixture given on the command line, printing one JSON line per result.
import { readFileSync } from 'node:fs';

const [bundle, ...fixtures] = process.argv.slice(2);
const { handler } = await import(bundle);
for (const f of fixtures) {
  const event = JSON.parse(readFileSync(f, 'utf8'));
  const res = await handler(event, { awsRequestId: 'cold-start', getRemainingTimeInMillis: () => 3000 });
  const body = res.isBase64Encoded ? Buffer.from(res.body, 'base64').toString() : res.body;
  console.log(JSON.stringify({ fixture: f.split('/').pop(), statusCode: res.statusCode, body: JSON.parse(body) }));
}
process.exit(0);
